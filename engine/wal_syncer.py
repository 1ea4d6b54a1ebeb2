"""The WAL syncer: fsyncs the WAL behind the writer and answers callers once it has.

With a writer thread, every group commit is written to the WAL without an fsync, and
the operations whose callers wait on durability (`Op.durable`: sends, cancels, acks...)
are handed to this thread. It calls RocksDB's SyncWAL (`TimerStore.sync_wal`), which
fsyncs every WAL byte appended before the call and lets the writer append more while it
runs, and only then completes those operations' futures. So a caller is still answered
only once its commit is on disk, while the loop that fires no longer waits for the disk:
while a compaction writes a hundred megabytes or more, one fsync can take tens of
milliseconds, and every timer due meanwhile used to wait with it (docs/lab-log.md has
the runs).

One sync at a time, each covering every commit handed over before it started; commits
handed over while one runs wait for the next, so syncs group as commits do. The writer
keeps its group commits as large as before: while a sync runs it does not commit queued
operations alone, only what falls due (engine/writer.py, `_sleep_until_due`), and this
thread tells it (`on_idle`) once nothing is left to sync; the writer wakes for that only
when operations wait (`Writer._wake`).

A failed sync is fatal, as it was in the writer: the commits it covered are applied but
maybe not durable. Their operations, and every one handed over later, fail with
ShuttingDown, and the writer stops when it next looks (`failure`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import structlog

from timerwheel.observability import metrics
from timerwheel.wheels.domain import ShuttingDown

log = structlog.get_logger("timerwheel.wal_syncer")

Answers = tuple[list, list]  # one group commit's (ops, outcomes), as the writer has them


class WalSyncer:
    def __init__(self, sync: Callable[[], None], on_idle: Callable[[], None]) -> None:
        """`sync`: make every commit written so far durable (raises on failure);
        `on_idle`: called once a sync has returned and nothing waits for another."""
        self._sync = sync
        self._on_idle = on_idle
        self._cond = threading.Condition()
        self._waiting: list[Answers] = []
        self._in_flight = False
        self._stopping = False
        self._stopped_error: ShuttingDown | None = None
        self.failure: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="timerwheel-wal-sync", daemon=True)

    def start(self) -> None:
        self._thread.start()

    @property
    def busy(self) -> bool:
        """A sync is running, or commits wait for one."""
        return self._in_flight or bool(self._waiting)

    def hand_over(self, ops: list, outcomes: list) -> None:
        """Answer `ops` (each by its outcome) once a sync that started after their commit
        was written has returned."""
        with self._cond:
            if self._stopped_error is None:
                self._waiting.append((ops, outcomes))
                self._cond.notify()
                return
        fail(ops, self._stopped_error)

    def wait_idle(self) -> None:
        """Return once everything handed over is synced and answered (or failed)."""
        with self._cond:
            while self.busy and self._thread.is_alive():
                self._cond.wait(0.1)

    def stop(self) -> None:
        """Sync and answer what was handed over, then end the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread.is_alive():
            self._thread.join()

    def _run(self) -> None:
        while answers := self._next_answers():
            started = time.perf_counter()
            try:
                self._sync()
            except BaseException as exc:
                self._failed(answers, exc)
                return
            metrics.recorder().wal_synced(time.perf_counter() - started)
            for ops, outcomes in answers:
                complete(ops, outcomes)
            with self._cond:
                self._in_flight = False
                idle = not self._waiting
                self._cond.notify_all()
            if idle:
                self._on_idle()

    def _next_answers(self) -> list[Answers]:
        """Everything handed over so far, once there is any; empty when stopping."""
        with self._cond:
            while not self._waiting and not self._stopping:
                self._cond.wait()
            answers, self._waiting = self._waiting, []
            self._in_flight = bool(answers)
            return answers

    def _failed(self, answers: list[Answers], exc: BaseException) -> None:
        log.error("wal_sync_failed", error=str(exc))
        with self._cond:
            self.failure = exc
            self._stopped_error = ShuttingDown(f"the timer writer stopped: {exc}")
            answers += self._waiting
            self._waiting = []
            self._in_flight = False
            self._cond.notify_all()
        for ops, _ in answers:
            fail(ops, self._stopped_error)
        self._on_idle()


def complete(ops: list, outcomes: list) -> None:
    """Complete each op's future with its outcome: (True, value) or (False, error)."""
    for op, (ok, value) in zip(ops, outcomes, strict=True):
        if ok:
            op.future.set_result(value)
        else:
            op.future.set_exception(value)


def fail(ops: list, error: BaseException) -> None:
    """Fail each op's future with `error`."""
    for op in ops:
        op.future.set_exception(error)
