"""The WAL syncer (engine/wal_syncer.py): callers answered only after a sync that started
after their commit, syncs grouped, a failed sync fatal. The sync here is a function the
test holds and releases with events, so every ordering is forced, none is timed."""

from __future__ import annotations

import threading
from concurrent.futures import Future

import pytest

from timerwheel.engine.wal_syncer import WalSyncer
from timerwheel.wheels.domain import NotFound, ShuttingDown

WAIT_S = 10  # a bound on a hang, never a pace


class Op:
    def __init__(self) -> None:
        self.future: Future = Future()


class HeldSync:
    """A sync that reports when it starts and returns only when released."""

    def __init__(self) -> None:
        self.started = threading.Semaphore(0)
        self.release = threading.Semaphore(0)
        self.calls = 0
        self.fail_with: BaseException | None = None

    def __call__(self) -> None:
        self.calls += 1
        self.started.release()
        assert self.release.acquire(timeout=WAIT_S)
        if self.fail_with is not None:
            raise self.fail_with

    def wait_started(self) -> None:
        assert self.started.acquire(timeout=WAIT_S)


@pytest.fixture
def sync():
    return HeldSync()


@pytest.fixture
def idle():
    return threading.Event()


@pytest.fixture
def syncer(sync, idle):
    syncer = WalSyncer(sync, idle.set)
    syncer.start()
    yield syncer
    sync.release.release()  # whatever is still held, let it go
    sync.release.release()
    syncer.stop()


def test_ops_are_answered_only_once_their_sync_returns(syncer, sync, idle):
    ok, refused = Op(), Op()
    syncer.hand_over([ok, refused], [(True, "id-1"), (False, NotFound("no such timer"))])
    sync.wait_started()
    assert syncer.busy
    assert not ok.future.done() and not refused.future.done()
    sync.release.release()
    assert ok.future.result(timeout=WAIT_S) == "id-1"
    with pytest.raises(NotFound):
        refused.future.result(timeout=WAIT_S)
    assert idle.wait(WAIT_S)
    assert not syncer.busy


def test_commits_handed_over_during_a_sync_wait_for_the_next_one(syncer, sync):
    first, second, third = Op(), Op(), Op()
    syncer.hand_over([first], [(True, 1)])
    sync.wait_started()
    syncer.hand_over([second], [(True, 2)])  # written while the first sync runs
    syncer.hand_over([third], [(True, 3)])
    sync.release.release()
    assert first.future.result(timeout=WAIT_S) == 1
    sync.wait_started()  # one more sync for both
    assert not second.future.done() and not third.future.done()
    sync.release.release()
    assert (second.future.result(timeout=WAIT_S), third.future.result(timeout=WAIT_S)) == (2, 3)
    assert sync.calls == 2


def test_a_failed_sync_fails_its_ops_and_every_later_one(syncer, sync, idle):
    covered, later = Op(), Op()
    syncer.hand_over([covered], [(True, 1)])
    sync.wait_started()
    syncer.hand_over([later], [(True, 2)])
    sync.fail_with = OSError("EIO")
    sync.release.release()
    for op in (covered, later):
        with pytest.raises(ShuttingDown, match="EIO"):
            op.future.result(timeout=WAIT_S)
    assert idle.wait(WAIT_S)
    assert isinstance(syncer.failure, OSError)
    after = Op()
    syncer.hand_over([after], [(True, 3)])  # nothing is synced any more
    with pytest.raises(ShuttingDown, match="EIO"):
        after.future.result(timeout=0)
    assert sync.calls == 1


def test_stop_syncs_and_answers_what_was_handed_over(sync, idle):
    syncer = WalSyncer(sync, idle.set)
    syncer.start()
    op = Op()
    syncer.hand_over([op], [(True, "kept")])
    sync.wait_started()
    stopping = threading.Thread(target=syncer.stop)
    stopping.start()
    sync.release.release()
    stopping.join(WAIT_S)
    assert not stopping.is_alive()
    assert op.future.result(timeout=0) == "kept"


def test_wait_idle_returns_once_everything_handed_over_is_synced(syncer, sync):
    op = Op()
    syncer.hand_over([op], [(True, 1)])
    sync.wait_started()
    waited = threading.Event()
    waiter = threading.Thread(target=lambda: (syncer.wait_idle(), waited.set()))
    waiter.start()
    assert not waited.wait(0.05)  # held by the sync (a check of "not yet", not a pace)
    sync.release.release()
    assert waited.wait(WAIT_S)
    assert op.future.done()
    waiter.join(WAIT_S)
