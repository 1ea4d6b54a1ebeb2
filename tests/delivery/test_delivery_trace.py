"""timerwheel.delivery.trace: what a dispatcher notes reaches the engine once, as groups in
the order noted (one per delivered batch, one per failed attempt)."""

from __future__ import annotations

import pytest

from timerwheel.delivery.trace import DeliveryTrace
from timerwheel.store import records
from timerwheel.wheels.trace import TraceKind

DELIVERED, NACKED = int(TraceKind.DELIVERED), int(TraceKind.NACKED)


class Recorder:
    """The engine's `record_trace`, remembering each call."""

    def __init__(self) -> None:
        self.calls: list[list] = []

    def record_trace(self, groups) -> bool:
        self.calls.append(groups)
        return True


def test_noted_batches_and_failures_go_to_the_engine_once_in_order():
    engine = Recorder()
    trace = DeliveryTrace(engine)
    trace.delivered(["a", "b"], [1, 2], "billing-1")
    trace.failed("a", 1, "db down")
    trace.delivered(["c"], [1], "billing-2")
    trace.flush()
    trace.flush()  # nothing noted since: no call
    assert engine.calls == [[
        (DELIVERED, "billing-1", ["a", "b"], [1, 2]),
        (NACKED, "db down", ["a"], [1]),
        (DELIVERED, "billing-2", ["c"], [1]),
    ]]  # fmt: skip


def test_without_first_attempts_only_redeliveries_and_failures_go_to_the_engine():
    engine = Recorder()
    trace = DeliveryTrace(engine, first_attempts=False)
    trace.delivered(["a", "b"], [1, 1], "billing-1")  # a batch of first deliveries: dropped
    trace.failed("a", 1, "db down")
    trace.delivered(["c", "a", "d"], [1, 2, 3], "billing-2")
    trace.flush()
    trace.delivered(["e"], [1], "billing-1")
    trace.flush()  # nothing left to hand over: no call
    assert engine.calls == [[
        (NACKED, "db down", ["a"], [1]),
        (DELIVERED, "billing-2", ["a", "d"], [2, 3]),
    ]]  # fmt: skip


def test_a_batch_whose_attempts_do_not_match_its_ids_is_refused():
    trace = DeliveryTrace(Recorder())
    with pytest.raises(ValueError, match="2 message ids but 1 attempts"):
        trace.delivered(["a", "b"], [1], "billing-1")


class Clock:
    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        return self.now


def test_first_attempts_wait_for_their_ack_and_go_as_events_if_it_does_not_come():
    engine, clock = Recorder(), Clock()
    trace = DeliveryTrace(engine, hold_ms=5_000, now_ms=clock)
    trace.delivered(["a", "b", "c"], [1, 1, 1], "billing-1")  # held: no call
    trace.flush()
    assert engine.calls == []
    acked = trace.take_for_ack(["a"])
    assert acked == [records.first_delivery_trailer(1_000, "billing-1")]
    trace.failed("b", 1, "db down")  # its delivery goes first, with its own time
    clock.now = 6_000
    trace.flush()
    assert engine.calls == [[
        (DELIVERED, "billing-1", ["b"], [1], 1_000),
        (NACKED, "db down", ["b"], [1]),
        (DELIVERED, "billing-1", ["c"], [1], 1_000),  # its hold ended unacked
    ]]  # fmt: skip


def test_a_reader_a_redelivery_and_a_failed_ack_hand_held_first_attempts_over():
    engine, clock = Recorder(), Clock()
    trace = DeliveryTrace(engine, hold_ms=5_000, now_ms=clock)
    trace.delivered(["a", "b", "c"], [1, 1, 1], "w")
    trace.write_now(["a"])
    trace.delivered(["b"], [2], "w")  # attempt 1 goes before attempt 2
    trailers = trace.take_for_ack(["c"])
    trace.ack_failed(["c"], trailers)
    trace.flush(everything=True)
    assert engine.calls == [
        [(DELIVERED, "w", ["a"], [1], 1_000)],
        [(DELIVERED, "w", ["b"], [1], 1_000), (DELIVERED, "w", ["b"], [2]),
         (DELIVERED, "w", ["c"], [1], 1_000)],
    ]  # fmt: skip
    assert trace.take_for_ack(["a", "b", "c"]) is None  # nothing held
