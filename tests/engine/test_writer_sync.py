"""Which group commits fsync (engine/writer.py, "Which commits fsync"): those a caller
waits on. Fires, cascades and delivery trace events alone reach the WAL without an
fsync, and survive the death of the process all the same; with the writer's thread the
fsyncs run on the WAL syncer's, and fires do not wait for them. Real RocksDB throughout;
the WAL syncs are counted (or held) on the real Rdict."""

from __future__ import annotations

import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers.engines import T0, delay
from helpers.failing_syncs import FailingSyncs
from helpers.unsynced_fire_child import CountingSyncs
from helpers.wakes import CountingCondition

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import ShuttingDown
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS, Settings
from timerwheel.wheels.trace import TraceKind

REPO = Path(__file__).resolve().parents[2]
WAIT_S = 10  # a bound on a hang, never a pace


@pytest.fixture
def clock() -> VirtualClock:
    return VirtualClock(T0)


@pytest.fixture
def engine(tmp_path, clock):
    engine = Engine(Settings(data_dir=str(tmp_path / "d"), sync_writes=True), clock,
                    background=False)  # fmt: skip
    database = engine.store.database
    database.db = CountingSyncs(database.db)
    yield engine
    database.db = database.db.inner
    engine.close()


def syncs(engine: Engine) -> int:
    return engine.store.database.db.syncs


def test_only_the_commits_a_caller_waits_on_sync_the_wal(engine, clock):
    first, later = engine.send_batch([delay(1_000), delay(HOUR_MS + 1_000)])
    assert syncs(engine) == 1  # the producer is answered after an fsync

    clock.advance(1_000)
    engine.run_until_idle()  # the fire alone
    assert engine.get(first.message_id).state is State.FIRED
    assert syncs(engine) == 1

    assert engine.record_trace([(TraceKind.DELIVERED, "sub", [first.message_id], [1])])
    engine.run_until_idle()  # a delivery trace event: nobody waits on it
    assert syncs(engine) == 1

    clock.advance(HOUR_MS - 5 * MINUTE_MS)
    engine.run_until_idle()  # the hour cascade (and the minute one after it)
    assert engine.get(later.message_id).wheel == "minute"
    assert syncs(engine) == 1

    assert engine.ack("orders", [first.message_id]) == [first.message_id]
    assert syncs(engine) == 2  # the consumer is answered after an fsync


def test_with_sync_writes_off_no_commit_syncs(tmp_path, clock):
    engine = Engine(Settings(data_dir=str(tmp_path / "d"), sync_writes=False), clock,
                    background=False)  # fmt: skip
    database = engine.store.database
    database.db = CountingSyncs(database.db)
    try:
        engine.send(delay(1_000))
        assert database.db.syncs == 0
    finally:
        database.db = database.db.inner
        engine.close()


def test_an_unsynced_fire_survives_sigkill_of_the_process(tmp_path):
    data_dir = tmp_path / "d"
    child = subprocess.run(
        [sys.executable, "-m", "tests.helpers.unsynced_fire_child", str(data_dir), str(T0)],
        cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert child.returncode == -9, child.stderr
    said = dict(line.split(" ", 1) for line in child.stdout.splitlines() if " " in line)
    message_id = said["sent"]
    assert said["fire_syncs"] == "0"  # the fire's commit did not fsync
    clock = VirtualClock(T0 + 1_000)
    reopened = Engine(Settings(data_dir=str(data_dir)), clock, background=False)
    try:
        timer = reopened.get(message_id)
        assert timer.state is State.FIRED  # not fired again: the fire was in the WAL
        assert reopened.scheduler.state.fire_seq == 1
    finally:
        reopened.close()


class HeldSyncs:
    """The real Rdict, except that while `held` every `flush_wal` waits to be released
    (a disk busy under a compaction's writes, on demand)."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.entered = threading.Event()
        self.released = threading.Event()
        self.released.set()

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def hold(self) -> None:
        self.released.clear()
        self.entered.clear()

    def flush_wal(self, sync: bool = True) -> None:
        self.entered.set()
        assert self.released.wait(WAIT_S)
        self.inner.flush_wal(sync)


def test_fires_do_not_wait_for_a_wal_sync_and_its_send_waits_for_it(tmp_path, clock):
    """With the writer's thread, a commit's fsync runs on the syncer's: while a send's
    sync is held, a timer that falls due still fires, and the send is answered only once
    its sync returns."""
    engine = Engine(Settings(data_dir=str(tmp_path / "d"), sync_writes=True), clock)
    database = engine.store.database
    held = database.db = HeldSyncs(database.db)
    fired = threading.Event()
    engine.add_fired_listener(lambda topics: fired.set())
    with ThreadPoolExecutor(1) as producer:
        try:
            due = engine.send(delay(1_000))  # synced and answered as usual
            held.hold()
            later = producer.submit(engine.send, delay(HOUR_MS))
            assert held.entered.wait(WAIT_S)  # the later send's sync has started
            clock.advance(1_000)  # the writer looks at the clock at least every 0.25 s
            assert fired.wait(WAIT_S), "the fire waited for the send's WAL sync"
            assert not later.done()  # not answered before its commit is durable
            held.released.set()
            assert later.result(WAIT_S).message_id != due.message_id
            assert engine.get(due.message_id).state is State.FIRED
        finally:
            held.released.set()
            database.db = held.inner
            engine.close()


def test_the_writer_is_woken_only_when_it_can_commit(tmp_path, clock):
    """An op queued while a WAL sync runs does not wake the writer (it commits queued ops
    only after the sync); the sync's end does. A sync that leaves nothing queued does not
    wake it either: with those, many of the writer's wakes under a steady send load did
    nothing (docs/benchmarks.md)."""
    engine = Engine(Settings(data_dir=str(tmp_path / "d"), sync_writes=True), clock,
                    background=False)  # fmt: skip
    writer = engine._writer
    wakes = writer._cond = CountingCondition()
    writer.start()  # the thread and the syncer, as `background=True` would
    database = engine.store.database
    held = database.db = HeldSyncs(database.db)
    try:
        engine.send(delay(HOUR_MS))
        engine.send(delay(HOUR_MS))  # answered after the first's sync ended, and its wake
        assert wakes.notified == 2  # one per send: none when a sync left nothing queued

        held.hold()
        synced_later = engine.send_batch_async([delay(HOUR_MS)])
        assert held.entered.wait(WAIT_S)  # its sync has started, and is held
        queued = engine.send_batch_async([delay(HOUR_MS)])  # in the queue when this returns
        assert wakes.notified == 3  # the first; the writer would not commit the second yet
        held.released.set()
        assert synced_later.result(WAIT_S) and queued.result(WAIT_S)
        assert wakes.notified == 4  # the sync's end, with an op queued behind it
    finally:
        held.released.set()
        database.db = held.inner
        engine.close()


def test_a_failed_sync_wakes_the_writer_to_stop(tmp_path, clock):
    """A failed sync is fatal: the syncer wakes the writer with nothing queued, so it
    stops at once rather than at its next due time."""
    engine = Engine(Settings(data_dir=str(tmp_path / "d"), sync_writes=True), clock,
                    background=False)  # fmt: skip
    writer = engine._writer
    wakes = writer._cond = CountingCondition()
    writer.start()
    database = engine.store.database
    database.db = FailingSyncs(database.db)
    try:
        with pytest.raises(ShuttingDown, match="syncing the WAL failed"):
            engine.send(delay(HOUR_MS))
        writer._syncer._thread.join(WAIT_S)  # its last act is to tell the writer
        assert wakes.notified == 2  # the send's, and the failed sync's
        assert engine.health.failed.wait(WAIT_S)
    finally:
        database.db = database.db.inner
        engine.close()
