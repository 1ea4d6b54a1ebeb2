"""timerwheel.engine.store_health: how each store error is classified, the backoff, the fast refusal
while the disk is full, and the failure listeners. The real faults (real RocksDB, a real
full tmpfs, real gRPC) are in tests/system/test_faults.py."""

from __future__ import annotations

import errno

import pytest

from timerwheel.engine.store_health import (
    BACKOFF_MAX_S,
    MAX_CONSECUTIVE_FAILURES,
    StoreHealth,
    WriterFailed,
)
from timerwheel.store.disk import is_disk_full
from timerwheel.store.rocks import WalSyncFailed, WriteFailed
from timerwheel.wheels.domain import DiskFull, Overloaded, StoreUnavailable

ROCKS_ENOSPC = "IO error: No space left on device: While appending to file: /d/000038.log"


def test_disk_full_is_recognised_from_rocksdb_text_oserror_and_cause():
    assert is_disk_full(Exception(ROCKS_ENOSPC))
    assert is_disk_full(OSError(errno.ENOSPC, "No space left on device"))
    wrapped = WriteFailed("RocksDB refused a write", disk_full=True)
    wrapped.__cause__ = Exception(ROCKS_ENOSPC)
    assert is_disk_full(wrapped)
    assert not is_disk_full(Exception("IO error: Input/output error"))
    assert not is_disk_full(OSError(errno.EIO, "Input/output error"))


def test_a_full_disk_refuses_at_once_with_a_message_naming_the_data_dir():
    health = StoreHealth("/srv/tw")
    health.refuse_if_full()  # not full: nothing raised
    health.iteration_failed(WriteFailed(f"RocksDB refused a write: {ROCKS_ENOSPC}", True))
    assert health.recovering
    with pytest.raises(DiskFull, match=r"^disk full: /srv/tw: No space left on device;") as full:
        health.refuse_if_full()
    assert isinstance(full.value, Overloaded)  # RESOURCE_EXHAUSTED, as backpressure
    assert not health.failed.is_set()


def test_errors_of_a_failed_iteration_say_full_disk_or_unavailable():
    health = StoreHealth("/srv/tw")
    assert isinstance(health.error_for(Exception(ROCKS_ENOSPC)), DiskFull)
    unavailable = health.error_for(OSError("read failed"))
    assert isinstance(unavailable, StoreUnavailable) and "read failed" in str(unavailable)
    refusal = Overloaded("queue full")
    assert health.error_for(refusal) is refusal  # domain errors pass through


@pytest.mark.parametrize(
    "error",
    [WalSyncFailed("syncing the WAL failed after a write: EIO"),
     WriteFailed("RocksDB refused a write: IO error: Input/output error", False)],
)  # fmt: skip
def test_a_failed_sync_or_a_refused_write_that_is_not_enospc_is_fatal(error):
    health = StoreHealth("/srv/tw")
    with pytest.raises(WriterFailed, match=str(error)):
        health.iteration_failed(error)


def test_read_errors_back_off_doubling_to_the_cap_then_become_fatal():
    health = StoreHealth("/srv/tw")
    delays = []
    for _ in range(MAX_CONSECUTIVE_FAILURES - 1):
        health.iteration_failed(OSError("read failed"))
        delays.append(health.backoff_s())
    assert delays[:4] == [0.05, 0.1, 0.2, 0.4]
    assert max(delays) == BACKOFF_MAX_S == delays[-1]
    with pytest.raises(WriterFailed, match=f"{MAX_CONSECUTIVE_FAILURES} writer iterations"):
        health.iteration_failed(OSError("read failed"))
    health.succeeded()
    assert health.backoff_s() == 0.05


def test_failure_listeners_hear_the_reason_once_even_when_added_late():
    health = StoreHealth("/srv/tw")
    heard: list[str] = []
    health.on_failed(heard.append)
    health.fail("syncing the WAL failed")
    health.fail("a second reason is ignored")
    health.on_failed(heard.append)  # after the fact: called at once
    assert heard == ["syncing the WAL failed", "syncing the WAL failed"]
    assert health.failed.is_set() and health.failure == "syncing the WAL failed"


def test_recovery_waits_for_the_stated_free_space_and_says_how_much(monkeypatch):
    """Below the figure a reopen is not even tried (it would fail on ENOSPC and close the
    store to readers); the refusal then names the figure and the free space, and the
    looks back off to the 2 s cap."""
    from timerwheel.engine import store_health

    health = StoreHealth("/srv/tw")
    health.iteration_failed(WriteFailed(f"RocksDB refused a write: {ROCKS_ENOSPC}", True))
    monkeypatch.setattr(store_health, "reopen_needs_bytes", lambda path: 30 * 1024 * 1024)
    monkeypatch.setattr(store_health, "free_bytes", lambda path: 5 * 1024 * 1024)

    reopens: list[str] = []

    class Store:
        def reopen(self) -> None:  # recover() would log a failure and go on: count it
            reopens.append("tried")
            raise OSError("No space left on device")

    for _ in range(8):
        assert not health.recover(Store(), scheduler=None)  # type: ignore[arg-type]
    assert reopens == []  # not tried below the figure
    assert health.recovering
    assert health.backoff_s() == BACKOFF_MAX_S
    with pytest.raises(DiskFull) as full:
        health.refuse_if_full()
    assert str(full.value).endswith(
        "writes resume once its disk has 30.0 MiB free (now 5.0 MiB), looked at every 2 s"
    )


def test_a_store_opened_read_only_starts_refusing_writes_until_reopened():
    health = StoreHealth("/srv/tw")
    health.opened_read_only()
    assert health.recovering and not health.failed.is_set()
    with pytest.raises(DiskFull, match=r"^disk full: /srv/tw: No space left on device;"):
        health.refuse_if_full()
