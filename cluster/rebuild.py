"""How much a takeover replays, and what keeps it bounded (docs/cluster.md, "The bounded
log"; decision 0011).

A takeover restores a partition from its latest snapshot plus the log above it
(`timerwheel.cluster.snapshot_io.PartitionSnapshots.rebuild`) and is reported as a
`Takeover`. The owner counts the log records (and bytes) above the latest snapshot, from
what the takeover replayed and what its appender appended since; once they pass the
node's `SnapshotTerms`, `SnapshotSchedule` starts one snapshot job for the partition, a
task on the node's NATS loop that never touches the engine or the writer (its folding
runs in a worker thread), so firing goes on while it runs. A failed job is tried again
after `retry_ms`; a fenced one ends with the partition (its appender is fenced too).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import structlog

from timerwheel.cluster.nats_io import Fenced
from timerwheel.cluster.settings import SnapshotTerms

if TYPE_CHECKING:
    from timerwheel.cluster.appender import Appender
    from timerwheel.cluster.snapshot_io import PartitionSnapshots, Taken

log = structlog.get_logger("timerwheel.cluster")


@dataclass
class Takeover:
    partition: int
    epoch: int
    records: int  # log records replayed above the snapshot
    live: int
    seconds: float
    at_ms: int
    snapshot_through: int = 0  # the snapshot's stream sequence (0: none yet)
    snapshot_live: int = 0
    standby_through: int = 0  # the warm standby's sequence it replayed above (0: none)


@dataclass
class Backlog:
    """Log above the partition's latest snapshot not counted by the appender, and the
    appender's counts when that was last set."""

    records: int
    bytes: int
    appended: int
    appended_bytes: int


class SnapshotSchedule:
    def __init__(self, terms: SnapshotTerms, monotonic_ms: Callable[[], int]) -> None:
        self.terms = terms
        self._monotonic_ms = monotonic_ms
        self._backlog: dict[int, Backlog] = {}
        self._running: set[int] = set()
        self._not_before: dict[int, int] = {}
        self._tasks: set[asyncio.Future] = set()
        self.taken: list[tuple[int, Taken]] = []  # (partition, what was taken), in order

    def owned(self, partition: int, records: int, size: int, appender: Appender) -> None:
        """A takeover replayed `records` log records (`size` bytes) above the snapshot."""
        counted = Backlog(records, size, appender.appended, appender.appended_bytes)
        self._backlog[partition] = counted
        self._not_before.pop(partition, None)

    def backlog(self, partition: int, appender: Appender) -> tuple[int, int]:
        """Log records and bytes above the latest snapshot (or the one being taken)."""
        found = self._backlog.get(partition)
        if found is None:
            return 0, 0
        return (
            found.records + appender.appended - found.appended,
            found.bytes + appender.appended_bytes - found.appended_bytes,
        )

    def tick(self, owned: dict[int, Appender], snapshots: dict[int, PartitionSnapshots]) -> None:
        """Start a job for each owned partition whose backlog passed the terms (on the
        node's loop, from the lease loop)."""
        now = self._monotonic_ms()
        for partition, appender in list(owned.items()):
            if partition in self._running or now < self._not_before.get(partition, now):
                continue
            if not self.terms.due(*self.backlog(partition, appender)):
                continue
            self._running.add(partition)
            task = asyncio.ensure_future(self._job(partition, appender, snapshots[partition]))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _job(self, partition: int, appender: Appender, snaps: PartitionSnapshots) -> None:
        before = self._backlog.get(partition)
        # From here the appender's records count toward the next snapshot (those appended
        # before the job reads the log's last sequence are counted twice: it comes early).
        self._backlog[partition] = Backlog(0, 0, appender.appended, appender.appended_bytes)
        try:
            taken = await snaps.take(appender.epoch, appender.marker_sequence)
        except Fenced:
            log.warning("cluster_snapshot_fenced", partition=partition)
        except Exception as error:
            if before is not None and partition in self._backlog:  # counted from before
                self._backlog[partition] = before
            self._not_before[partition] = self._monotonic_ms() + self.terms.retry_ms
            said = getattr(error, "description", None) or str(error)
            log.warning("cluster_snapshot_failed", partition=partition, error=f"{error!r} {said}")
        else:
            self.taken.append((partition, taken))
            pointer = taken.pointer
            log.info(
                "cluster_snapshot_taken", partition=partition, through=pointer.through,
                live=pointer.live, bytes=pointer.size, records_folded=taken.records,
                seconds=round(taken.seconds, 3),
            )  # fmt: skip
        finally:
            self._running.discard(partition)

    def dropped(self, partition: int) -> None:
        """The partition left this node (a job still running ends fenced or harmless:
        a pointer it publishes before the next owner's marker is one that owner loads)."""
        self._backlog.pop(partition, None)
        self._not_before.pop(partition, None)

    def cancel(self) -> None:
        for task in list(self._tasks):
            task.cancel()
