"""Warm standbys: a node keeps the partitions it would take next folded as their logs grow,
so a takeover replays only what its standby lags (docs/cluster.md, "Warm standby";
decision 0011).

The standby of a partition is the first node in the partition's rendezvous order (the
order placement prefers nodes in) that is not its owner, among the live nodes: the node
that takes the partition when its owner goes. A standby's index is the partition's fold
(`timerwheel.cluster.journal.Fold`) through a stream sequence X, in memory: the latest
snapshot when it starts (or when a newer one than X appears), then every record above X
read from the stream every `POLL_S`. It never touches the engine, so it never fires or
delivers. A takeover stops the partition's standby between two reads and starts its
rebuild from (fold, X) instead of from the snapshot
(`timerwheel.cluster.snapshot_io.PartitionSnapshots.rebuild`).

A purge below a snapshot's S may remove records a standby has not read: a read is kept
only if the latest pointer is the same after it as before it (or not past X); otherwise
the standby loads the newer snapshot at its next round.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

import structlog

from timerwheel.cluster import journal
from timerwheel.cluster.snapshot_io import PartitionSnapshots, fold_records

log = structlog.get_logger("timerwheel.cluster")

POLL_S = 0.5  # a standby reads the log above its sequence this often
FAILED_S = 1.0  # and waits this much longer after a round that failed
TAKE_WAIT_S = 2.0  # a takeover waits at most this for the standby's read in progress


class Standby:
    def __init__(self, snaps: PartitionSnapshots) -> None:
        self.snaps = snaps
        self.partition = snaps.partition
        self.fold: journal.Fold | None = None  # None: (re)load the latest snapshot first
        self.through = 0
        self.applied = 0  # log records applied since it started (for Stats and the tests)
        self.stream_last = 0  # the stream's last sequence as its last round read it
        self._lock = asyncio.Lock()
        self._stopped = False
        self._task = asyncio.ensure_future(self._run())

    async def _run(self) -> None:
        while not self._stopped:
            try:
                async with self._lock:
                    if self._stopped:
                        return
                    await self._catch_up()
            except asyncio.CancelledError:
                raise
            except Exception as error:  # NATS away for a moment: the fold through X stays
                log.warning("cluster_standby_failed", partition=self.partition, error=repr(error))
                await asyncio.sleep(FAILED_S)
            await asyncio.sleep(POLL_S)

    async def _catch_up(self) -> None:
        last = await self.snaps.log.last_sequence()  # one call a round while nothing moves
        self.stream_last = max(self.stream_last, last)
        if self.fold is not None and last <= self.through:
            return
        _, pointer = await self.snaps.last_pointer()
        if self.fold is None or (pointer is not None and pointer.through > self.through):
            self.fold = None  # until the load succeeds
            self.fold, pointer = await self.snaps.load()
            self.through = pointer.through if pointer is not None else 0
        if last <= self.through:
            return
        records = await self.snaps.log.read_log(self.through, last)
        _, after = await self.snaps.last_pointer()
        if after != pointer and after is not None and after.through > self.through:
            return  # a purge may have taken records of this read: the snapshot next round
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(None, fold_records, self.fold, records)
        except BaseException:
            self.fold = None  # folded in part: start again from the snapshot
            raise
        self.through = last
        self.applied += len(records)

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
