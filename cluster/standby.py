"""Warm standbys: a node keeps the partitions it would take next folded as their logs grow,
so a takeover replays only what its standby lags (docs/cluster.md, "Warm standby";
decision 0011).

The standby of a partition is the first node in the partition's rendezvous order (the
order placement prefers nodes in) that is not its owner, among the live nodes: the node
that takes the partition when its owner goes. A standby's index is the partition's fold
(`timerwheel.cluster.journal.Fold`) through a stream sequence X, in memory: the latest
snapshot when it starts (or when a gap in the log shows a newer one), then every message
above X, read every `POLL_S` through one pull consumer kept open from round to round
(`timerwheel.cluster.log_tail.LogTail`: one request a round). It never touches the
engine, so it never fires or delivers. A takeover stops the partition's standby between
two reads and starts its rebuild from (fold, X) instead of from the snapshot
(`timerwheel.cluster.snapshot_io.PartitionSnapshots.rebuild`).

A purge below a snapshot's S may remove records a standby has not read. The tail reads
every subject of the stream, so its stream sequences run on without a hole unless
messages were removed; a read is kept only up to the first hole. At a hole the standby
asks for the latest pointer: past X, the purge may have taken records it needs, and it
loads that snapshot (the same rule as "keep a read only if the pointer did not move past
it", checked when the stream shows a removal instead of twice every round); not past X,
no record it needs was purged (a delivery was lost on the way), and it reads on from X
through a new consumer. It makes a new consumer also after an error (NATS away, the
consumer gone after a NATS restart), and then asks for the stream's last sequence too,
so Stats shows its lag while it cannot read.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import structlog

from timerwheel.cluster import journal
from timerwheel.cluster.log_tail import LogTail
from timerwheel.cluster.snapshot_io import PartitionSnapshots, fold_records

log = structlog.get_logger("timerwheel.cluster")

POLL_S = 0.5  # a standby reads the log above its sequence this often
FAILED_S = 1.0  # and waits this much longer after a round that failed
TAKE_WAIT_S = 2.0  # a takeover waits at most this for the standby's read in progress


_closing: set[asyncio.Future[None]] = set()  # tails being dropped after their standby stopped


async def _drop(tail: LogTail) -> None:
    with contextlib.suppress(Exception):  # else the server drops it when inactive
        await tail.close()


class Standby:
    def __init__(self, snaps: PartitionSnapshots) -> None:
        self.snaps = snaps
        self.partition = snaps.partition
        self.fold: journal.Fold | None = None  # None: (re)load the latest snapshot first
        self.through = 0
        self.applied = 0  # log records applied since it started (for Stats and the tests)
        self.stream_last = 0  # the stream's last sequence as its last round read it
        self._tail: LogTail | None = None  # the consumer it reads through, kept between rounds
        self._lock = asyncio.Lock()
        self._stopped = False
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self._stopped:
            if not await self.round():
                await asyncio.sleep(FAILED_S)
            await asyncio.sleep(POLL_S)

    def _drop_tail(self) -> None:
        """Delete its consumer off the caller's path (a takeover does not wait on it). A
        node that stops without this leaves it to the servers' inactive threshold."""
        tail, self._tail = self._tail, None
        if tail is not None:
            _closing.add(task := asyncio.ensure_future(_drop(tail)))
            task.add_done_callback(_closing.discard)

    async def round(self) -> bool:
        """One read of the log and its fold; False if it failed (NATS away for a moment:
        the fold through X stays, the next round reads through a new consumer)."""
        try:
            async with self._lock:
                if not self._stopped:
                    await self._catch_up()
            return True
        except asyncio.CancelledError:
            raise
        except Exception as error:
            log.warning("cluster_standby_failed", partition=self.partition, error=repr(error))
            await self._after_failure()
            return False

    async def _catch_up(self) -> None:
        if self.fold is None:
            await self._close_tail()
            self.fold, pointer = await self.snaps.load()
            self.through = pointer.through if pointer is not None else 0
            self.stream_last = max(self.stream_last, self.through)
        if self._tail is None:
            self._tail = await self.snaps.log.tail(self.through)
        read = await self._tail.read()
        self.stream_last = max(self.stream_last, read.stream_last)
        if read.records:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(None, fold_records, self.fold, read.records)
            except BaseException:
                self.fold = None  # folded in part: start again from the snapshot
                raise
        self.through = read.through
        self.applied += len(read.records)
        if read.gap:  # messages past X removed (a purge) or lost on the way (module doc)
            await self._close_tail()
            _, pointer = await self.snaps.last_pointer()
            if pointer is not None and pointer.through > self.through:
                self.fold = None  # loaded at the next round

    async def _after_failure(self) -> None:
        """A new consumer at the next round; the stream's last sequence for Stats."""
        with contextlib.suppress(Exception):
            await self._close_tail()
        with contextlib.suppress(Exception):
            self.stream_last = max(self.stream_last, await self.snaps.log.last_sequence())

    async def _close_tail(self) -> None:
        tail, self._tail = self._tail, None
        if tail is not None:
            await tail.close()

    async def take(self) -> tuple[journal.Fold, int] | None:
        """Stop, between two reads; the fold and its sequence, if it has one. None if a
        read does not end within TAKE_WAIT_S (the takeover starts from the snapshot
        rather than wait on a slow read)."""
        self._stopped = True
        try:
            await asyncio.wait_for(self._lock.acquire(), TAKE_WAIT_S)
        except TimeoutError:
            self._task.cancel()
            return None
        self._lock.release()
        self._task.cancel()
        with contextlib.suppress(BaseException):
            await self._task
        self._drop_tail()
        return (self.fold, self.through) if self.fold is not None else None

    @property
    def lag(self) -> int:
        """Stream sequences it has not folded of those its last read found (Stats)."""
        if self.fold is None:  # (re)loading its snapshot: it has folded nothing yet
            return self.stream_last
        return max(0, self.stream_last - self.through)

    def stop(self) -> None:
        self._stopped = True
        self._task.cancel()
        self._drop_tail()


class Standbys:
    """The standbys a node runs: `keep` starts and stops them to match its roles."""

    def __init__(self, snaps: dict[int, PartitionSnapshots]) -> None:
        self._snaps = snaps
        self.running: dict[int, Standby] = {}

    def keep(self, partitions: Iterable[int]) -> None:
        wanted = set(partitions)
        for partition in list(self.running):
            if partition not in wanted:
                self.running.pop(partition).stop()
                log.info("cluster_standby_stopped", partition=partition)
        for partition in sorted(wanted - set(self.running)):
            self.running[partition] = Standby(self._snaps[partition])
            log.info("cluster_standby_started", partition=partition)

    async def take(self, partition: int) -> tuple[journal.Fold, int] | None:
        standby = self.running.pop(partition, None)
        return None if standby is None else await standby.take()
