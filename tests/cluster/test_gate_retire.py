"""The delivery gate retires fired rows of partitions the node gave up, and never rows of a
partition whose takeover started while it read the engine (a restore fires those rows:
retiring them would lose acknowledged timers). Over a real engine on RocksDB, no NATS: the
node's takeover is started as `ClusterNode._step` starts it."""

from __future__ import annotations

from helpers.engines import T0, engine_factory

from timerwheel.cluster.gate import DeliveryGate
from timerwheel.cluster.lease import LeaseView
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.partitions import partition_of
from timerwheel.cluster.settings import NodeSettings
from timerwheel.common import State
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind

PARTITIONS = 4
HELD = 0


class _TakeoverDuringFetch:
    """The engine, except that its first fetch starts a takeover of `partition` first."""

    def __init__(self, engine, node: ClusterNode, partition: int | None) -> None:
        self._engine = engine
        self._node = node
        self._partition = partition

    def __getattr__(self, name: str):
        return getattr(self._engine, name)

    def fetch_deliveries(self, *args, **kwargs):
        if self._partition is not None:
            with self._node.retire_lock:  # as ClusterNode._step does
                self._node._taking.add(self._partition)
            self._partition = None
        return self._engine.fetch_deliveries(*args, **kwargs)


def _fired(tmp_path, clock, make):
    engine = make()
    ids = [f"order-{n}" for n in range(40)]
    engine.send_batch(
        [SendSpec("orders", b"b", When(WhenKind.DELAY, 1_000), message_id=i) for i in ids]
    )
    clock.advance(2_000)
    engine.run_until_idle()
    assert {engine.get(i).state for i in ids} == {State.FIRED}
    return engine, ids


def _node(engine) -> ClusterNode:
    node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), PARTITIONS), engine)
    node._owned[HELD] = None  # held: only its appender's presence counts here
    return node


def test_rows_of_partitions_given_up_are_retired_and_held_ones_handed_out(tmp_path):
    clock = VirtualClock(T0)
    with engine_factory(tmp_path, clock) as make:
        engine, ids = _fired(tmp_path, clock, make)
        node = _node(engine)
        rows = DeliveryGate(node, engine).fetch_deliveries("orders", 0, 100)
        held = {i for i in ids if partition_of(i, PARTITIONS) == HELD}
        assert {r.message_id for r in rows} == held and 0 < len(held) < len(ids)
        for message_id in set(ids) - held:
            assert engine.get(message_id).state is State.ACKED, message_id


def test_a_takeover_started_during_the_fetch_retires_nothing(tmp_path):
    clock = VirtualClock(T0)
    with engine_factory(tmp_path, clock) as make:
        engine, ids = _fired(tmp_path, clock, make)
        node = _node(engine)
        taken = 1
        gate = DeliveryGate(node, _TakeoverDuringFetch(engine, node, taken))
        assert gate.fetch_deliveries("orders", 0, 100) == []  # the gate closed meanwhile
        restoring = [i for i in ids if partition_of(i, PARTITIONS) == taken]
        assert restoring
        for message_id in ids:
            assert engine.get(message_id).state is State.FIRED, message_id
        node._taking.discard(taken)
        node._owned[taken] = None  # the takeover ended: both partitions are handed out
        rows = gate.fetch_deliveries("orders", 0, 100)
        assert {partition_of(r.message_id, PARTITIONS) for r in rows} == {HELD, taken}


def test_a_held_partition_whose_lease_is_gone_delivers_nothing_before_it_is_lost(tmp_path):
    """The lease loop sets a partition's view from the store's answer (another node holds
    it now: `held` None), and may await before `_lose` takes the partition out of `_owned`
    (a resumed node after a SIGSTOP did so, and delivered 1,935 timers it had fired after
    the pause). Meanwhile the gate must stay closed and nothing may be retired."""
    clock = VirtualClock(T0)
    with engine_factory(tmp_path, clock) as make:
        engine, ids = _fired(tmp_path, clock, make)
        node = _node(engine)
        node._views[HELD] = LeaseView(HELD, node.holder, node.node.lease)  # held: None
        assert not node.gate_open
        assert DeliveryGate(node, engine).fetch_deliveries("orders", 0, 100) == []
        assert {engine.get(i).state for i in ids} == {State.FIRED}  # none retired
