"""server.delivery_trace: what a dispatcher notes reaches the engine once, as groups in
the order noted (one per delivered batch, one per failed attempt)."""

from __future__ import annotations

import pytest

from server.delivery_trace import DeliveryTrace
from wheels.trace import TraceKind

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
