"""timerwheel.engine.trace_ops: a TraceOp's delivery events, stored per message on real RocksDB in
virtual time. Events arrive in groups (one a delivered batch or failed attempt) and those
that share kind, attempt and text share one encoding; each message must still get
exactly its own events, in the order they happened."""

from __future__ import annotations

import pytest

from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.trace import TraceEvent, TraceKind

T0 = 1_700_000_000_000
DELIVERED, NACKED = int(TraceKind.DELIVERED), int(TraceKind.NACKED)


@pytest.fixture
def three(tmp_path):
    """An engine in virtual time with three timers due in a minute: (clock, engine, ids)."""
    clock = VirtualClock(T0)
    engine = Engine(Settings(data_dir=str(tmp_path / "d"), sync_writes=False), clock,
                    background=False)  # fmt: skip
    try:
        sent = engine.send_batch([SendSpec("orders", b"x", When(WhenKind.DELAY, 60_000))] * 3)
        yield clock, engine, [r.message_id for r in sent]
    finally:
        engine.close()


def test_each_message_gets_its_own_events_from_one_op(three):
    clock, engine, (a, b, c) = three
    clock.advance(5)
    engine.record_trace([
        (DELIVERED, "billing-1", [a, b], [1, 1]), (DELIVERED, "billing-2", [c], [1]),
        (NACKED, "db down", [a], [1]), (DELIVERED, "billing-1", [a], [2]),
        (NACKED, "db down", [b], [1]),
    ])  # fmt: skip
    engine.run_until_idle()
    at = T0 + 5
    assert engine.store.trace.read(a) == [
        TraceEvent(TraceKind.DELIVERED, at, attempt=1, subscriber="billing-1"),
        TraceEvent(TraceKind.NACKED, at, attempt=1, detail="db down"),
        TraceEvent(TraceKind.DELIVERED, at, attempt=2, subscriber="billing-1"),
    ]
    assert engine.store.trace.read(b) == [
        TraceEvent(TraceKind.DELIVERED, at, attempt=1, subscriber="billing-1"),
        TraceEvent(TraceKind.NACKED, at, attempt=1, detail="db down"),
    ]
    assert engine.store.trace.read(c) == [
        TraceEvent(TraceKind.DELIVERED, at, attempt=1, subscriber="billing-2"),
    ]


def test_one_batch_with_a_redelivery_in_it_gives_each_message_its_attempt(three):
    _, engine, (a, b, c) = three
    assert engine.record_trace([(DELIVERED, "billing-1", [a, b, c], [1, 3, 1])])
    engine.run_until_idle()
    attempts = {
        message_id: [(e.attempt, e.subscriber) for e in engine.store.trace.read(message_id)]
        for message_id in (a, b, c)
    }
    assert attempts == {a: [(1, "billing-1")], b: [(3, "billing-1")], c: [(1, "billing-1")]}
