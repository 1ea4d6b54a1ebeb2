"""An owner's appends to one partition's log: one publish in flight, everything queued
meanwhile in the next (docs/cluster.md, "The log").

Callers on any thread hand entries in with `submit` and wait on the future it returns: it
completes with the record's stream sequence once a quorum has the record, or fails with
`Fenced` (a newer epoch owns the partition) or `LogUnavailable` (no quorum answered before
the owner's lease deadline). A timed-out publish is retried under the same `Nats-Msg-Id`
(`<epoch>.<marker sequence>.<record number>`), so the stream stores it once however many
times it is sent. The marker's sequence makes the id one appender's own: a partition given
up and taken anew under the same lease gets a new marker and a new appender, whose
records must never be taken for its predecessor's within the stream's duplicate window
(JetStream would answer such a publish with the earlier record's sequence and store
nothing). A first try answered as a duplicate is therefore refused, never acknowledged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import Future

from timerwheel.cluster import journal
from timerwheel.cluster.nats_io import Fenced, PartitionLog
from timerwheel.wheels.domain import ShuttingDown

PUBLISH_TIMEOUT_S = 1.0  # one try; the deadline bounds the retries
MAX_RECORD_BYTES = 768 * 1024  # below the NATS default max_payload (1 MiB)


class LogUnavailable(ShuttingDown):
    """The partition's log did not take the record in time (no quorum, no server): the
    caller is answered UNAVAILABLE and retries; the change may or may not have happened."""


class Appender:
    def __init__(
        self, log: PartitionLog, epoch: int, marker_sequence: int,
        loop: asyncio.AbstractEventLoop, deadline_ms: Callable[[], int | None],
        monotonic_ms: Callable[[], int], on_fenced: Callable[[Appender], None],
    ) -> None:  # fmt: skip
        self.log = log
        self.epoch = epoch
        self.marker_sequence = marker_sequence
        self._loop = loop
        self._deadline_ms = deadline_ms  # the lease's local deadline, None once lost
        self._monotonic_ms = monotonic_ms
        self._on_fenced = on_fenced
        self._queue: asyncio.Queue[tuple[list[journal.Entry], Future] | None] = asyncio.Queue()
        self._records = 0
        self.appended = 0
        self.appended_bytes = 0
        self.last_sequence = marker_sequence
        self._task = asyncio.run_coroutine_threadsafe(self._run(), loop)

    def submit(self, entries: list[journal.Entry]) -> Future:
        future: Future = Future()
        if not entries:
            future.set_result(self.last_sequence)
            return future
        self._loop.call_soon_threadsafe(self._queue.put_nowait, (entries, future))
        return future

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._queue.put_nowait, None)

    async def drained(self) -> None:
        """Until the appender has stopped (after `close`): every record it took is in the
        log or failed."""
        await asyncio.wrap_future(self._task)

    async def _run(self) -> None:
        closing = False
        while not closing:
            first = await self._queue.get()
            if first is None:
                break
            waiting = [first]
            size = 0
            while not self._queue.empty() and size < MAX_RECORD_BYTES // 2:
                item = self._queue.get_nowait()
                if item is None:
                    closing = True
                    break
                waiting.append(item)
                size += sum(map(journal.body_bytes, item[0]))
            entries = [entry for batch, _ in waiting for entry in batch]
            data = journal.encode(entries)
            try:
                sequence = await self._append(data)
            except BaseException as error:
                for _, future in waiting:
                    if not future.done():
                        future.set_exception(error)
                if isinstance(error, Fenced):
                    self._drain(error)
                    return
                continue
            self.appended += 1
            self.appended_bytes += len(data)
            self.last_sequence = sequence
            for _, future in waiting:
                if not future.done():
                    future.set_result(sequence)
        self._drain(LogUnavailable("the partition's appender closed"))

    def _drain(self, error: BaseException) -> None:
        while not self._queue.empty():
            item = self._queue.get_nowait()
            if item is not None and not item[1].done():
                item[1].set_exception(error)

    async def _append(self, data: bytes) -> int:
        self._records += 1
        msg_id = f"{self.epoch}.{self.marker_sequence}.{self._records}"
        tried = False
        while True:
            deadline = self._deadline_ms()
            if deadline is None or self._monotonic_ms() >= deadline:
                raise LogUnavailable(
                    f"partition {self.log.partition}: the log took no record before this "
                    "node's lease deadline"
                )
            try:
                sequence, duplicate = await asyncio.wait_for(
                    self.log.append(data, self.marker_sequence, msg_id), PUBLISH_TIMEOUT_S
                )
            except Fenced as fenced:
                self._on_fenced(self)
                raise fenced
            except (TimeoutError, OSError):
                tried = True
                await asyncio.sleep(0.05)  # same msg id: stored once if the first got in
                continue
            except Exception:
                tried = True
                await asyncio.sleep(0.1)
                continue
            if duplicate and not tried:
                raise LogUnavailable(
                    f"partition {self.log.partition}: record id {msg_id} was taken for an "
                    f"earlier record (stream sequence {sequence}); this one is not stored"
                )
            return sequence


def monotonic_ms() -> int:
    """The node's lease clock: CLOCK_BOOTTIME counts time the machine was suspended too, so
    a suspended node's deadline has passed when it wakes (docs/cluster.md, "Ownership")."""
    return time.clock_gettime_ns(time.CLOCK_BOOTTIME) // 1_000_000
