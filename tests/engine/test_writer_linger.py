"""Delivery trace events linger for the writer's next commit (engine/writer.py, "Which
ops wake the writer"): they ride along with a commit made for something else, manual
mode still commits them, and a trace read sees every event recorded before it. Real
RocksDB; the writer's commits are counted on the real Rdict."""

from __future__ import annotations

import pytest

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.engine.move_ops import DeadLetterOp, RescheduleOp
from timerwheel.engine.ops import AckOp, CancelOp, Op
from timerwheel.engine.send_op import SendOp
from timerwheel.engine.trace_ops import TraceBarrier, TraceOp
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import MINUTE_MS, Settings
from timerwheel.wheels.trace import TraceKind

T0 = 1_700_002_800_000 - 30 * MINUTE_MS


class CountingWrites:
    """The real Rdict, counting its writes (one per group commit) and WAL syncs."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.writes = 0
        self.syncs = 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def write(self, batch, write_opt=None) -> None:
        self.writes += 1
        self.inner.write(batch, write_opt=write_opt)

    def flush_wal(self, sync: bool = True) -> None:
        self.syncs += 1
        self.inner.flush_wal(sync)


def due(ms: int) -> SendSpec:
    return SendSpec("orders", b"body", When(WhenKind.DELAY, ms))


def open_engine(tmp_path, clock: VirtualClock, background: bool) -> tuple[Engine, CountingWrites]:
    settings = Settings(data_dir=str(tmp_path / "d"), sync_writes=True)
    engine = Engine(settings, clock, background=background)
    database = engine.store.database
    counting = database.db = CountingWrites(database.db)
    return engine, counting


def delivered(engine: Engine, message_id: str) -> list[tuple[int, str]]:
    """The DELIVERED events stored for `message_id`, read past the engine's barrier."""
    return [
        (e.attempt, e.subscriber)
        for e in engine.store.trace.read(message_id)
        if e.kind is TraceKind.DELIVERED
    ]


@pytest.fixture
def fired(tmp_path):
    """A manual-mode engine whose one timer has fired: (engine, counting, message id)."""
    clock = VirtualClock(T0)
    engine, counting = open_engine(tmp_path, clock, background=False)
    [first] = engine.send_batch([due(1_000)])
    clock.advance(1_000)
    engine.run_until_idle()
    yield engine, counting, first.message_id
    engine.store.database.db = counting.inner
    engine.close()


def test_trace_events_ride_along_with_the_next_commit(fired):
    engine, counting, message_id = fired
    writes = counting.writes
    assert engine.record_trace([(TraceKind.DELIVERED, "billing", [message_id], [1])])
    assert counting.writes == writes  # queued, not committed by itself
    engine.ack("orders", [message_id])  # an op somebody waits on
    assert counting.writes == writes + 1  # one group commit carried both
    assert delivered(engine, message_id) == [(1, "billing")]
    assert engine.get(message_id).state is State.ACKED


def test_manual_mode_runs_until_lingering_events_are_committed(fired):
    engine, counting, message_id = fired
    syncs = counting.syncs
    engine.record_trace([(TraceKind.DELIVERED, "billing", [message_id], [1])])
    engine.run_until_idle()
    assert delivered(engine, message_id) == [(1, "billing")]
    assert counting.syncs == syncs  # nobody waits on them: no fsync


def test_a_trace_read_sees_events_recorded_just_before_it(tmp_path):
    """With the writer's thread: the timer is due in an hour, so the writer sleeps its
    longest idle sleep; the read commits the lingering events first (TraceBarrier)."""
    clock = VirtualClock(T0)
    engine, counting = open_engine(tmp_path, clock, background=True)
    try:
        [sent] = engine.send_batch([due(60 * MINUTE_MS)])
        syncs = counting.syncs
        events = [(TraceKind.DELIVERED, "billing", [sent.message_id] * 2, [1, 2])]
        assert engine.record_trace(events)
        timer = engine.get(sent.message_id, include_trace=True)
        assert [(e.kind, e.attempt) for e in timer.trace if e.kind is TraceKind.DELIVERED] == [
            (TraceKind.DELIVERED, 1), (TraceKind.DELIVERED, 2),
        ]  # fmt: skip
        assert counting.syncs == syncs  # the barrier's commit does not fsync
    finally:
        engine.store.database.db = counting.inner
        engine.close()


def all_op_types(base: type[Op]) -> set[type[Op]]:
    found = set(base.__subclasses__())
    for sub in list(found):
        found |= all_op_types(sub)
    return found


def test_only_trace_events_linger_every_op_a_caller_waits_on_wakes_the_writer():
    kinds = all_op_types(Op)
    assert {AckOp, CancelOp, SendOp, RescheduleOp, DeadLetterOp, TraceOp} <= kinds
    assert {kind for kind in kinds if kind.linger_ms} == {TraceOp}
    assert all(kind.durable for kind in kinds if kind.linger_ms == 0 and kind is not TraceBarrier)
    assert not TraceOp.durable
