"""Message traces through the engine and the delivery hub, in virtual time on real RocksDB:
what `Get(include_trace)` shows for each path a timer can take, and that traces and
attempt counts survive a restart (the hub and engine run without threads, so every
fire, delivery and trace write happens inside the call that causes it)."""

from __future__ import annotations

import pytest

from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.trace import TraceKind

K = TraceKind
T0 = 1_700_000_000_000
HOUR_MS = 3_600_000


class World:
    def __init__(self, data_dir: str, **settings: object) -> None:
        self.clock = VirtualClock(T0)
        # retry_initial_ms=0: redeliveries at once, so a trace's attempts need no backoff.
        self.settings = Settings(
            data_dir=data_dir, sync_writes=False, ack_timeout_ms=60_000, retry_initial_ms=0,
            **settings,
        )  # fmt: skip
        self.open()

    def open(self) -> None:
        self.engine = Engine(self.settings, self.clock, background=False)
        self.hub = DeliveryHub(self.engine, self.settings, self.clock.now_ms, background=False)

    def close(self) -> None:
        self.hub.close()
        self.engine.close()

    def reopen(self) -> None:
        self.close()
        self.open()

    def run_until(self, t_ms: int, step_ms: int = 20_000) -> None:
        """Time passes in steps, the engine doing what each moment asks (cascades first)."""
        while self.clock.now_ms() < t_ms:
            self.clock.advance(min(step_ms, t_ms - self.clock.now_ms()))
            self.engine.run_until_idle()

    def get(self, message_id: str):
        """`Get` with the trace, as the service reads it: what the hub holds first."""
        self.hub.write_trace([message_id])
        self.engine.run_until_idle()  # delivery events are written without waiting
        return self.engine.get(message_id, include_trace=True)

    def trace(self, message_id: str) -> list[tuple]:
        timer = self.get(message_id)
        return [
            (e.kind, e.wheel, e.from_wheel, e.attempt, e.subscriber, e.detail) for e in timer.trace
        ]


@pytest.fixture
def world(tmp_path):
    made = World(str(tmp_path / "data"))
    yield made
    made.close()


def test_a_timer_cascaded_fired_redelivered_once_and_acked_and_after_a_restart(world):
    sent = world.engine.send(SendSpec("jobs", b"x", When(WhenKind.DELAY, 3 * HOUR_MS)))
    world.run_until(sent.deliver_at_ms)
    subscriber = world.hub.subscribe("jobs", 5, name="worker-1")
    [first] = world.hub.next_batch(subscriber, timeout_s=0)
    assert world.hub.nack("jobs", [sent.message_id], reason="db down") == (1, 0)
    [second] = world.hub.next_batch(subscriber, timeout_s=0)
    assert (first.attempt, second.attempt) == (1, 2)
    assert world.hub.ack("jobs", [sent.message_id]) == 1
    expected = [
        (K.SENT, "hour", "", 0, "", ""),
        (K.CASCADED, "minute", "hour", 0, "", ""),
        (K.CASCADED, "second", "minute", 0, "", ""),
        (K.FIRED, "second", "", 0, "", ""),
        (K.DELIVERED, "", "", 1, "worker-1", ""),
        (K.NACKED, "", "", 1, "", "db down"),
        (K.DELIVERED, "", "", 2, "worker-1", ""),
        (K.ACKED, "", "", 0, "", ""),
    ]
    assert world.trace(sent.message_id) == expected
    timer = world.engine.get(sent.message_id, include_trace=True)
    times = [e.at_ms for e in timer.trace]
    assert times == sorted(times) and times[0] == timer.created_at_ms
    assert times[3] == timer.fired_at_ms and times[-1] == timer.acked_at_ms
    assert times[1] < sent.deliver_at_ms - 5 * 60_000  # the hour cascade's lead
    assert timer.attempts == 2
    assert world.engine.get(sent.message_id).trace == ()  # only when asked for

    world.reopen()
    assert world.trace(sent.message_id) == expected


def test_attempt_counts_carry_on_across_a_restart(world):
    sent = world.engine.send(SendSpec("jobs", b"x", When(WhenKind.DELAY, 0)))
    subscriber = world.hub.subscribe("jobs", 5, name="a")
    [delivered] = world.hub.next_batch(subscriber, timeout_s=0)
    assert delivered.attempt == 1
    world.reopen()  # never acked: that attempt failed
    subscriber = world.hub.subscribe("jobs", 5, name="b")
    [again] = world.hub.next_batch(subscriber, timeout_s=0)
    assert (again.fired.message_id, again.attempt) == (sent.message_id, 2)
    assert world.trace(sent.message_id)[-2:] == [
        (K.DELIVERED, "", "", 1, "a", ""),
        (K.DELIVERED, "", "", 2, "b", ""),
    ]
    assert world.engine.get(sent.message_id, include_trace=True).attempts == 2


def test_a_message_whose_last_attempt_was_before_a_restart_goes_to_its_dead_letters(world):
    options = SendOptions(max_attempts=1)
    sent = world.engine.send(SendSpec("jobs", b"x", When(WhenKind.DELAY, 0), options=options))
    other = world.engine.send(SendSpec("jobs", b"y", When(WhenKind.DELAY, 0)))
    subscriber = world.hub.subscribe("jobs", 1, name="a")
    [delivered] = world.hub.next_batch(subscriber, timeout_s=0)
    assert delivered.fired.message_id == sent.message_id
    world.reopen()
    subscriber = world.hub.subscribe("jobs", 5, name="b")
    batch = world.hub.next_batch(subscriber, timeout_s=0)
    assert [(d.fired.message_id, d.attempt) for d in batch] == [(other.message_id, 1)]
    dead = world.engine.get(sent.message_id, include_trace=True)
    assert dead.topic == "jobs.dlq"
    assert dead.properties["timerwheel.dead_letter.attempts"] == "1"
    assert [e[0] for e in world.trace(sent.message_id)] == [
        K.SENT, K.FIRED, K.DELIVERED, K.DEAD_LETTERED, K.FIRED,
    ]  # fmt: skip
    assert world.trace(sent.message_id)[3][5] == "jobs.dlq"
    assert dead.attempts == 0  # none yet in the dead-letter topic


def test_a_rescheduled_then_cancelled_timer(world):
    sent = world.engine.send(SendSpec("jobs", b"x", When(WhenKind.DELAY, 30_000)))
    world.clock.advance(1_000)
    world.engine.reschedule(sent.message_id, When(WhenKind.DELAY, 2 * HOUR_MS))
    world.clock.advance(1_000)
    world.engine.cancel(sent.message_id)
    assert world.trace(sent.message_id) == [
        (K.SENT, "second", "", 0, "", ""),
        (K.RESCHEDULED, "hour", "", 0, "", ""),
        (K.CANCELLED, "", "", 0, "", ""),
    ]
    timer = world.engine.get(sent.message_id, include_trace=True)
    assert timer.trace[1].deliver_at_ms == timer.deliver_at_ms


def test_without_first_deliveries_the_trace_keeps_retries_and_exact_counts(tmp_path):
    world = World(str(tmp_path / "data"), trace_first_deliveries=False)
    try:
        nacked = world.engine.send(SendSpec("jobs", b"x", When(WhenKind.DELAY, 0)))
        in_flight = world.engine.send(SendSpec("jobs", b"y", When(WhenKind.DELAY, 0)))
        subscriber = world.hub.subscribe("jobs", 5, name="worker-1")
        assert [d.attempt for d in world.hub.next_batch(subscriber, timeout_s=0)] == [1, 1]
        assert world.hub.nack("jobs", [nacked.message_id], reason="db down") == (1, 0)
        [again] = world.hub.next_batch(subscriber, timeout_s=0)
        assert (again.fired.message_id, again.attempt) == (nacked.message_id, 2)
        assert world.trace(nacked.message_id) == [
            (K.SENT, "", "", 0, "", ""),
            (K.FIRED, "", "", 0, "", ""),
            (K.NACKED, "", "", 1, "", "db down"),
            (K.DELIVERED, "", "", 2, "worker-1", ""),
        ]
        assert [e[0] for e in world.trace(in_flight.message_id)] == [K.SENT, K.FIRED]
        world.reopen()  # neither acked: both attempts in flight failed
        subscriber = world.hub.subscribe("jobs", 5, name="worker-2")
        batch = world.hub.next_batch(subscriber, timeout_s=0)
        # the retried one carries on exactly; the first attempt in flight across the
        # restart was not written, so it is made again (Settings.trace_first_deliveries)
        assert sorted((d.fired.message_id, d.attempt) for d in batch) == sorted(
            [(nacked.message_id, 3), (in_flight.message_id, 1)]
        )
        assert world.engine.get(nacked.message_id, include_trace=True).attempts == 3
    finally:
        world.close()


def timed(world: World, message_id: str) -> list[tuple]:
    """The trace with each event's time from T0, topic and attempts."""
    timer = world.get(message_id)
    events = [(e.kind, e.at_ms - T0, e.attempt, e.subscriber, e.detail) for e in timer.trace]
    return [timer.topic, timer.attempts, *events]


def script(world: World) -> dict[str, str]:
    """Four paths a first delivery can take: acked in time, failed and retried, never
    acked (its hold ends), dead-lettered. The ids by path."""
    options = SendOptions(max_attempts=1)
    specs = [SendSpec("jobs", bytes([n]), When(WhenKind.DELAY, 1_000)) for n in range(3)]
    specs.append(SendSpec("jobs", b"d", When(WhenKind.DELAY, 1_000), options=options))
    sent = [s.message_id for s in world.engine.send_batch(specs)]
    ids = dict(zip(("acked", "retried", "unacked", "dead"), sent, strict=True))
    world.run_until(T0 + 1_000)
    subscriber = world.hub.subscribe("jobs", 10, name="w")
    assert len(world.hub.next_batch(subscriber, timeout_s=0)) == 4
    world.engine.run_until_idle()  # written at once (hold 0): at the delivery's time
    world.clock.advance(7)
    assert world.hub.nack("jobs", [ids["retried"]], reason="busy") == (1, 0)
    assert world.hub.nack("jobs", [ids["dead"]], reason="broken") == (1, 1)
    world.engine.run_until_idle()
    [again] = world.hub.next_batch(subscriber, timeout_s=0)
    assert again.attempt == 2
    world.clock.advance(5)
    assert world.hub.ack("jobs", [ids["acked"], ids["retried"]]) == 2
    world.run_until(world.clock.now_ms() + world.settings.first_delivery_hold_ms)
    world.hub.trace.flush()  # the hub's next hand-over: what was held too long goes
    world.engine.run_until_idle()
    return ids


def test_a_held_first_delivery_reads_as_one_written_at_once_with_fewer_entries(tmp_path):
    held = World(str(tmp_path / "held"))
    at_once = World(str(tmp_path / "at-once"), first_delivery_hold_ms=0)
    try:
        ids, same_ids = script(held), script(at_once)
        for path, message_id in ids.items():
            assert timed(held, message_id) == timed(at_once, same_ids[path]), path
        stored = {p: len(held.engine.store.trace.read(m)) for p, m in ids.items()}
        written = {p: len(at_once.engine.store.trace.read(m)) for p, m in same_ids.items()}
        assert written["acked"] == 1 and stored["acked"] == 0  # it is in the acked record
        assert {p: n for p, n in stored.items() if p != "acked"} == {
            p: n for p, n in written.items() if p != "acked"
        }
    finally:
        held.close()
        at_once.close()


def test_a_held_first_delivery_counts_for_the_attempts_a_new_hub_restores(world):
    sent = world.engine.send(SendSpec("jobs", b"x", When(WhenKind.DELAY, 0)))
    subscriber = world.hub.subscribe("jobs", 5, name="a")
    assert len(world.hub.next_batch(subscriber, timeout_s=0)) == 1
    world.engine.run_until_idle()
    assert world.engine.store.trace.read(sent.message_id) == []  # held for its Ack
    world.hub.close()  # the delivery side stops (handing over what it held) and starts
    world.engine.run_until_idle()
    world.hub = DeliveryHub(world.engine, world.settings, world.clock.now_ms, background=False)
    subscriber = world.hub.subscribe("jobs", 5, name="b")
    [again] = world.hub.next_batch(subscriber, timeout_s=0)
    assert (again.fired.message_id, again.attempt) == (sent.message_id, 2)
