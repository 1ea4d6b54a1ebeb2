"""The delivery gate's own account of its closings (`timerwheel.cluster.gate_state`): how
often it closed, for how long and why, and that a fetch refused while it was closed is
followed by a wake of the hub once it opens. The switch alone on a stepped clock, then a
node (not started: no NATS is needed for its verdicts) over a real engine on RocksDB."""

from __future__ import annotations

from helpers.engines import T0, engine_factory

from timerwheel.cluster.appender import monotonic_ms
from timerwheel.cluster.gate import DeliveryGate
from timerwheel.cluster.gate_state import GateState
from timerwheel.cluster.lease import Held, LeaseTerms, LeaseView
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind

PARTITIONS = 2


class _Switch:
    """What a node tells its gate: the reason it is closed (None: open), on a clock the
    test steps."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self.now_ms = 0
        self.woken: list[list[str]] = []

    def gate(self) -> GateState:
        gate = GateState(lambda: self.reason, lambda: ["orders"], lambda: self.now_ms)
        gate.add_listener(self.woken.append)
        return gate


def test_closings_are_counted_with_their_length_and_reason():
    switch = _Switch()
    gate = switch.gate()
    gate.check()
    assert gate.stats.closures == 0 and gate.open
    switch.reason = "lease past its deadline"
    gate.check()
    switch.now_ms = 250
    gate.check()  # still closed: the same closing
    assert not gate.open and gate.closed_now_ms() == 250
    switch.now_ms, switch.reason = 400, None
    gate.check()
    switch.now_ms, switch.reason = 1_000, "takeover restoring"
    gate.check()
    switch.now_ms, switch.reason = 1_100, None
    gate.check()
    assert gate.stats.as_dict() == {
        "closures": 2, "closed_ms": 500, "longest_closed_ms": 400, "refused_fetches": 0,
        "reasons": {"lease past its deadline": 1, "takeover restoring": 1},
    }  # fmt: skip
    assert gate.closed_now_ms() == 0 and gate.open


def test_a_fetch_refused_between_two_ticks_is_counted_and_woken_after():
    switch = _Switch()
    gate = switch.gate()
    gate.check()
    switch.reason = "lease past its deadline"  # passed between two ticks of the lease loop
    assert not gate.open
    gate.starved()
    switch.reason = None  # the next tick finds the lease renewed
    gate.check()
    assert gate.stats.refused_fetches == 1
    assert switch.woken == [["orders"]]  # the hub reads again: delivery resumes
    gate.check()
    assert switch.woken == [["orders"]]  # woken once, not at every tick


def test_a_wake_that_fails_is_tried_again_at_the_next_tick():
    switch = _Switch()
    failures = [OSError("the engine could not list its ready topics")] * 2

    def ready_topics() -> list[str]:
        if failures:
            raise failures.pop()
        return ["orders"]

    gate = GateState(lambda: switch.reason, ready_topics, lambda: switch.now_ms)
    gate.add_listener(switch.woken.append)
    switch.reason = "lease past its deadline"
    gate.check()
    switch.reason = None
    gate.check()  # opens: its wake fails (and once more), and does not raise out of it
    assert gate.open and switch.woken == []
    gate.check()
    assert switch.woken == [["orders"]]


def test_a_late_lease_closes_the_node_and_the_hub_is_woken_when_it_is_renewed(tmp_path):
    clock = VirtualClock(T0)
    with engine_factory(tmp_path, clock) as make:
        engine = make()
        ids = [f"order-{n}" for n in range(20)]
        engine.send_batch(
            [SendSpec("orders", b"b", When(WhenKind.DELAY, 1_000), message_id=i) for i in ids]
        )
        clock.advance(2_000)
        engine.run_until_idle()
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), PARTITIONS), engine)
        terms = LeaseTerms()

        def views(renewed_at_ms: int) -> dict[int, LeaseView]:
            held = Held(epoch=1, revision=1, renewed_at_ms=renewed_at_ms, marker_sequence=1)
            return {p: LeaseView(p, node.holder, terms, held=held) for p in range(PARTITIONS)}

        node._views = views(monotonic_ms())
        node._owned.update({p: None for p in range(PARTITIONS)})  # only their presence counts
        gate = DeliveryGate(node, engine)
        woken: list[set[str]] = []
        gate.add_fired_listener(woken.append)
        node._check_gate()
        assert node.closed_reason() is None and node.gate_open

        node._views = views(monotonic_ms() - terms.hold_ms - 1)  # renewals answered too late
        assert node.closed_reason() == "lease past its deadline"
        assert gate.fetch_deliveries("orders", 0, 100) == []  # refused, the hub's cursor kept
        node._check_gate()
        assert node.gate_stats["closures"] == 1 and not node.gate_open
        assert not woken

        node._views = views(monotonic_ms())  # renewed: the same epoch, OWN again
        node._check_gate()
        stats = node.gate_stats
        assert stats["closures"] == 1 and stats["closed_now_ms"] == 0
        assert stats["reasons"] == {"lease past its deadline": 1}
        assert stats["refused_fetches"] == 1
        assert woken and all(topics == {"orders"} for topics in woken)
        rows = gate.fetch_deliveries("orders", 0, 100)
        assert {r.message_id for r in rows} == set(ids)  # all of them, none retired
