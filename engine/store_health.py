"""What the writer does when the store fails: retry, recover, or stop for good and say so.

The writer (timerwheel.engine.writer) is the only thread that mutates the store, so it is the one
that meets write errors, and it decides here what each one means:

* **A failed WAL sync** (`WalSyncFailed`): the batch is applied but maybe not durable, and
  carrying on could reuse the fire sequences it took. Fatal: the writer stops for good.
* **A full disk** (ENOSPC, from a write or from RocksDB's own flush): the batch is not
  applied, its operations fail with `DiskFull` (RESOURCE_EXHAUSTED, "disk full: <data
  dir>: ..."), and so do queued ones; new operations are refused at once while it lasts,
  rather than queued behind a writer that cannot write. RocksDB refuses every write after
  such an error, even once space is back, so recovery is a reopen of the database in this
  process (rocksdict has no `Resume`), followed by one small write that proves the store
  takes writes again. A reopen writes the WAL out as tables before it frees the WAL, so
  it is tried only once the disk has the free space that needs
  (`timerwheel.store.disk.reopen_needs_bytes`: the WAL's size, 2% and 1 MiB more), checked
  with backoff; the refusal message says how much that is. An earlier try would fail
  on ENOSPC and leave the store closed to readers. A store opened read-only at start,
  on a disk too full to open it for writing, waits the same way (`opened_read_only`).
* **Any other refused write** (`WriteFailed` that is not ENOSPC): RocksDB is read-only
  with a cause this code cannot judge. Fatal, so a restart (which recovers from the WAL)
  replaces guessing.
* **Anything else** (a read failing while the writer scans or sleeps): logged and retried
  with backoff; the iteration's operations fail with `StoreUnavailable` (UNAVAILABLE,
  retryable). Only after `MAX_CONSECUTIVE_FAILURES` in a row is it fatal.

Fatal means: `failed` is set and the listeners are told the reason (the server turns its
health to NOT_SERVING and `timerwheel serve` exits 1, so an orchestrator restarts it;
with `--workers N` the engine process exits 1 and the supervisor restarts it).

Backoff between attempts starts at `BACKOFF_FIRST_S` and doubles up to `BACKOFF_MAX_S`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from timerwheel.common import TimerwheelError
from timerwheel.store.batch import StagedBatch
from timerwheel.store.disk import free_bytes, is_disk_full, mib, reopen_needs_bytes
from timerwheel.store.rocks import WalSyncFailed, WriteFailed
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import DiskFull, StoreUnavailable
from timerwheel.wheels.scheduler import Scheduler

log = structlog.get_logger("timerwheel.store_health")

BACKOFF_FIRST_S = 0.05
BACKOFF_MAX_S = 2.0
MAX_CONSECUTIVE_FAILURES = 40  # ~75 s of failing iterations at the 2 s cap


class WriterFailed(Exception):
    """The writer cannot continue; the message is the reason an operator reads."""


class StoreHealth:
    """The writer's fault state, read by other threads (submit, health, serve's loop)."""

    def __init__(self, data_dir: str) -> None:
        self.data_dir = data_dir
        self.failed = threading.Event()
        self.failure: str | None = None
        self._listeners: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        self._disk_full: str | None = None  # the message sends are refused with
        self._needs_reopen = False
        self._waiting_logged = False
        self._failures = 0

    # == read by other threads ==========================================================
    def refuse_if_full(self) -> None:
        """Raise DiskFull while the disk is full (new operations are refused at once)."""
        message = self._disk_full
        if message is not None:
            raise DiskFull(message)

    def on_failed(self, listener: Callable[[str], None]) -> None:
        """`listener(reason)` once the writer has stopped for good (now, if it has)."""
        with self._lock:
            if self.failure is None:
                self._listeners.append(listener)
                return
        listener(self.failure)

    # == the writer thread ==============================================================
    def opened_read_only(self) -> None:
        """The store was opened read-only (a disk too full to open it for writing): refuse
        writes as for a full disk, and reopen it for writing once there is room."""
        self._needs_reopen = True
        self._disk_full = self._disk_full_message()
        self._waiting_logged = False

    @property
    def recovering(self) -> bool:
        """True while the store must be reopened before the writer can write again."""
        return self._needs_reopen

    def backoff_s(self) -> float:
        return min(BACKOFF_FIRST_S * 2 ** max(self._failures - 1, 0), BACKOFF_MAX_S)

    def error_for(self, exc: BaseException) -> BaseException:
        """What the operations of an iteration that raised `exc` fail with."""
        if isinstance(exc, TimerwheelError):
            return exc
        if is_disk_full(exc):
            return DiskFull(self._disk_full or self._disk_full_message())
        return StoreUnavailable(f"the store failed ({exc}); nothing was written, retry")

    def iteration_failed(self, exc: BaseException) -> None:
        """Classify a failed iteration: raises WriterFailed when it is fatal."""
        self._failures += 1
        if isinstance(exc, WalSyncFailed):
            raise WriterFailed(str(exc)) from exc
        if is_disk_full(exc):
            if self._disk_full is None:
                self._disk_full = self._disk_full_message()
                log.error("disk_full", data_dir=self.data_dir, error=str(exc))
                self._waiting_logged = False
            self._needs_reopen = True
            return
        if isinstance(exc, WriteFailed):
            raise WriterFailed(str(exc)) from exc
        if self._failures >= MAX_CONSECUTIVE_FAILURES:
            raise WriterFailed(f"{self._failures} writer iterations failed in a row: {exc}")
        log.warning("writer_iteration_failed", error=repr(exc), failures=self._failures)

    def succeeded(self) -> None:
        """An iteration went through: the backoff starts over."""
        self._failures = 0

    def recover(self, store: TimerStore, scheduler: Scheduler) -> bool:
        """Reopen the store after a refused write, when the disk has room; True once it
        takes writes again. Raises WriterFailed if the reopened store is not what the
        scheduler holds (the failed batch reached the WAL after all: a restart, which
        recovers from the WAL, must take over)."""
        free, needed = free_bytes(self.data_dir), reopen_needs_bytes(self.data_dir)
        if free is not None and free < needed:
            self._disk_full = self._disk_full_message(needed, free)
            if not self._waiting_logged:  # once an episode: the backoff polls every 2 s
                self._waiting_logged = True
                log.warning(
                    "disk_full_waiting", data_dir=self.data_dir, free_bytes=free,
                    needed_bytes=needed,
                )  # fmt: skip
            self._failures += 1  # backs off to BACKOFF_MAX_S between looks
            return False
        try:
            store.reopen()
        except Exception as exc:  # e.g. still no room for a new WAL; the store stays closed
            log.warning("store_reopen_failed", data_dir=self.data_dir, error=str(exc))
            self._failures += 1
            return False
        loaded = store.load_state()
        if loaded is not None and loaded != scheduler.state:
            raise WriterFailed("after reopening, the store's state is not the writer's")
        probe = StagedBatch()  # rewrites the state it holds: proves a write goes through
        store.stage_state(probe, scheduler.state)
        try:
            store.commit(probe)
        except Exception as exc:
            self.iteration_failed(exc)
            return False
        self._needs_reopen = False
        self._disk_full = None
        self._failures = 0
        log.info("store_reopened", data_dir=self.data_dir, free_bytes=free, needed_bytes=needed)
        return True

    def fail(self, reason: str) -> None:
        """The writer stops for good: tell the listeners (once)."""
        with self._lock:
            if self.failure is not None:
                return
            self.failure = reason
            listeners, self._listeners = self._listeners, []
        self.failed.set()
        log.error("writer_failed", reason=reason, data_dir=self.data_dir)
        for listener in listeners:
            try:
                listener(reason)
            except Exception:
                log.exception("writer_failed_listener_error")

    def _disk_full_message(self, needed: int | None = None, free: int | None = None) -> str:
        if needed is None:
            needed, free = reopen_needs_bytes(self.data_dir), free_bytes(self.data_dir)
        return (
            f"disk full: {self.data_dir}: No space left on device; nothing was written; "
            f"writes resume once its disk has {mib(needed)} free (now {mib(free)}), "
            f"looked at every {BACKOFF_MAX_S:g} s"
        )
