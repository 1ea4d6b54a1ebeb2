"""The engine reopened over the same RocksDB: a cascade cut off mid-way resumes at its pace,
what fell due while it was down fires, and a failed WAL sync stops the writer without
rolling back what readers saw."""

from __future__ import annotations

import pytest
from helpers.engines import T0, delay, wheel_count
from helpers.failing_syncs import FailingSyncs

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.store.rocks import WalSyncFailed
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, ShuttingDown, When, WhenKind
from timerwheel.wheels.scheduler import TimerKey
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings


@pytest.fixture
def clock():
    return VirtualClock(T0)


def test_reopen_finishes_a_cascade_that_was_cut_off(tmp_path, clock):
    settings = Settings(data_dir=str(tmp_path / "d"), sync_writes=False, cascade_chunk=100)
    engine = Engine(settings, clock, background=False)
    hour_start = T0 - T0 % HOUR_MS + 2 * HOUR_MS
    sent = engine.send_batch(
        [SendSpec("t", b"", When(WhenKind.DELIVER_AT, hour_start + i * 1000)) for i in range(1_000)]
    )
    # A minute into the hour cascade's paced window (4 min for the hour's 60): timers due
    # in its first 15 minutes may move, 900 of the 1,000.
    clock.advance(hour_start - settings.hour_cascade_lead_ms + MINUTE_MS - T0)
    assert engine.step()  # one chunk of the hour cascade, then "crash"
    assert engine.scheduler.state.cascades[1].pending_from is not None
    engine.close()
    reopened = Engine(settings, clock, background=False)
    try:
        reopened.run_until_idle()  # resumes at the same pace
        paced_to = reopened.scheduler.state.cascades[1].pending_from
        assert paced_to == TimerKey.start_of(hour_start + 900_000)
        assert wheel_count(reopened, "hour") == 100 and wheel_count(reopened, "minute") == 900
        _, hour_finish_ahead_ms = settings.cascade_finish_ahead_ms()
        clock.advance(hour_start - hour_finish_ahead_ms - clock.now_ms())
        reopened.run_until_idle()
        assert reopened.scheduler.state.cascades[1].pending_from is None
        assert wheel_count(reopened, "hour") == 0 and wheel_count(reopened, "minute") == 1_000
        assert {reopened.get(r.message_id).wheel for r in sent} == {"minute"}
    finally:
        reopened.close()


def test_reopen_fires_what_became_overdue_while_down(tmp_path, clock):
    settings = Settings(data_dir=str(tmp_path / "d"), sync_writes=False)
    engine = Engine(settings, clock, background=False)
    ids = [engine.send(delay(d)).message_id for d in (5_000, 10 * MINUTE_MS, 5 * HOUR_MS)]
    engine.close()
    clock.advance(DAY_MS)
    reopened = Engine(settings, clock, background=False)
    try:
        reopened.run_until_idle()
        fired = reopened.fetch_fired("orders", 0, 10)
        assert sorted(f.timer.message_id for f in fired) == sorted(ids)
        assert all(f.timer.fired_at_ms == T0 + DAY_MS for f in fired)
    finally:
        reopened.close()


def test_a_failed_wal_sync_stops_the_writer_and_keeps_the_applied_state(tmp_path, clock):
    """After `write`, a failed sync leaves the batch applied: the writer must neither roll
    its state back (it would reuse fire sequence numbers) nor go on as if durable."""
    settings = Settings(data_dir=str(tmp_path / "d"), sync_writes=True)
    engine = Engine(settings, clock, background=False)
    database = engine.store.database
    try:
        first = engine.send(delay(1_000))
        queued = engine.send_batch_async([delay(5_000)])
        database.db = FailingSyncs(database.db)
        clock.advance(1_000)
        with pytest.raises(WalSyncFailed, match="the disk is gone"):
            engine.step()  # fires `first` and applies the queued send, but cannot sync
        with pytest.raises(ShuttingDown, match="syncing the WAL failed"):
            queued.result()  # never acknowledged
        assert engine.scheduler.state.fire_seq == 1  # kept, not rolled back to 0
        assert engine.get(first.message_id).state is State.FIRED  # what readers see
        with pytest.raises(ShuttingDown):
            engine.send(delay(1_000))
    finally:
        database.db = getattr(database.db, "inner", database.db)
        engine.close()
    reopened = Engine(settings, clock, background=False)
    try:
        assert reopened.scheduler.state.fire_seq == 1
        second = reopened.send(delay(0))
        reopened.run_until_idle()
        fired = reopened.fetch_fired("orders", 0, 10)
        assert [(f.seq, f.timer.message_id) for f in fired] == [
            (1, first.message_id),
            (2, second.message_id),
        ]
    finally:
        reopened.close()
