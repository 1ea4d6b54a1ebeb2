"""Taking a partition over: the epoch marker, the partition's latest snapshot and the log
above it restored into the node's engine, then an appender under the new epoch
(docs/cluster.md, "What a node does now" and "The bounded log"). A partition whose
snapshot is missing or damaged, or whose log holds a record this build cannot read, is
refused: its lease goes back and the node leaves it for `REFUSED_MS`, rather than serve a
part of its timers (decision 0011). `ClusterNode` mixes
this in; the lease loop starts `_take_over` as a task once a lease is won.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
from typing import TYPE_CHECKING

import structlog

from timerwheel.cluster import journal
from timerwheel.cluster.appender import Appender, monotonic_ms
from timerwheel.cluster.fencing import EpochMarker, MarkerStep, marker_step
from timerwheel.cluster.lease import LeaseView, Release
from timerwheel.cluster.rebuild import SnapshotSchedule, Takeover
from timerwheel.cluster.restore import restore_op
from timerwheel.cluster.snapshot import SnapshotInvalid
from timerwheel.cluster.standby import Standbys

if TYPE_CHECKING:
    from timerwheel.cluster.nats_io import NatsLeaseStore, PartitionLog
    from timerwheel.cluster.placement import Placement
    from timerwheel.cluster.settings import NodeSettings
    from timerwheel.cluster.snapshot_io import PartitionSnapshots
    from timerwheel.engine.engine import Engine
    from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.cluster")

RESTORE_CHUNK = 1_000  # sends per engine batch while a takeover restores a partition
REFUSED_MS = 30_000  # a node that found a partition's snapshot invalid leaves it this long


class Takeovers:
    node: NodeSettings
    engine: Engine
    settings: Settings
    holder: str
    address: str
    placement: Placement
    snapshots: SnapshotSchedule
    standbys: Standbys
    takeovers: list[Takeover]
    retire_lock: threading.Lock
    series_lock: threading.RLock
    _views: dict[int, LeaseView]
    _owned: dict[int, Appender]
    _taking: set[int]
    _logs: dict[int, PartitionLog]
    _snaps: dict[int, PartitionSnapshots]
    _store: NatsLeaseStore

    def _purge(self, partition: int) -> None:
        raise NotImplementedError

    def series_taken(self, partition: int, appender: Appender) -> None:
        raise NotImplementedError

    def series_dropped(self, partition: int) -> None:
        raise NotImplementedError

    def _check_gate(self) -> None:
        raise NotImplementedError

    def _set_gate(self, open_: bool, reason: str = "") -> None:
        raise NotImplementedError

    async def _take_over(self, partition: int) -> None:
        started = time.monotonic()
        try:
            view = self._views[partition]
            if view.held is None:
                return
            epoch = view.held.epoch
            partition_log = self._logs[partition]
            last_seq, marker = await partition_log.last_marker()
            step = marker_step(epoch, self.holder, marker)
            if step is MarkerStep.DEPOSED:
                self._views[partition] = view.deposed()
                return
            written = await partition_log.write_marker(
                EpochMarker(epoch, self.holder, self.address), last_seq
            )
            if written is None:
                return  # another marker got there: the next tick reads again
            last_seq = written
            try:
                warm = await self.standbys.take(partition)
                rebuilt = await self._snaps[partition].rebuild(warm)
            except SnapshotInvalid as error:
                await self._refuse(partition, str(error), "cluster_snapshot_invalid")
                return
            except journal.BadRecord as error:
                await self._refuse(partition, str(error), "cluster_log_unreadable")
                return
            fold = rebuilt.fold
            not_before = self.engine.now_ms() - self.settings.max_past_ms + 60_000
            sents = list(fold.live.values())
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._restore, sents, not_before)
            view = self._views[partition]
            if view.held is None or view.held.epoch != epoch:
                await loop.run_in_executor(None, self._purge, partition)
                return
            self._views[partition] = view.fenced(last_seq)
            appender = Appender(
                partition_log, epoch, last_seq, loop, functools.partial(self._deadline, partition),
                monotonic_ms, self._fenced,
            )  # fmt: skip
            with self.series_lock:  # series changes of the restore: logged first
                self._owned[partition] = appender
                self.series_taken(partition, appender)
            self.snapshots.owned(
                partition, fold.records, rebuilt.replayed_bytes, self._owned[partition]
            )  # fmt: skip
            pointer = rebuilt.pointer
            takeover = Takeover(
                partition, epoch, rebuilt.replayed, len(sents), time.monotonic() - started,
                self.engine.now_ms(), pointer.through if pointer else 0,
                pointer.live if pointer else 0, rebuilt.standby_through,
            )  # fmt: skip
            self.takeovers.append(takeover)
            log.info(
                "cluster_partition_owned", partition=partition, epoch=epoch,
                records_replayed=rebuilt.replayed, live=len(sents),
                snapshot_through=takeover.snapshot_through,
                standby_through=takeover.standby_through, seconds=round(takeover.seconds, 3),
            )  # fmt: skip
            self._check_gate()
        except Exception as error:
            log.warning("cluster_takeover_failed", partition=partition, error=repr(error))
        finally:
            self._taking.discard(partition)
            self.series_dropped(partition)  # held changes not taken by an appender

    async def _refuse(self, partition: int, reason: str, event: str) -> None:
        """The partition's snapshot is missing or damaged (the log below it is purged), or
        a record of its log is one this build cannot read (a newer version, an unknown
        kind: docs/cluster.md, "Upgrading a cluster"): give the lease back and leave the
        partition for REFUSED_MS rather than serve a part of its timers, so a node that
        can read it takes it meanwhile. Calls on it answer UNAVAILABLE until one does."""
        log.error(event, partition=partition, error=reason)
        self.placement.refuse(partition, monotonic_ms() + REFUSED_MS)
        view = self._views[partition]
        if view.held is None:
            return
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self._store.delete_async(view.key, view.held.revision),
                self.node.call_timeout_ms / 1000,
            )
        self._views[partition] = view.answered(Release(view.key, view.held.revision), True)

    def _deadline(self, partition: int) -> int | None:
        return self._views[partition].deadline_ms()

    def _restore(self, sents: list[journal.Sent], not_before_ms: int) -> None:
        for start in range(0, len(sents), RESTORE_CHUNK):
            chunk = sents[start : start + RESTORE_CHUNK]
            op = restore_op(chunk, not_before_ms, self.engine.now_ms())
            self.engine.submit_sends(op).result()

    def _fenced(self, appender: Appender) -> None:
        """An append was refused: a newer marker is in; give the partition up at once. Not
        when the refused appender is an earlier one of a partition taken anew under the
        same lease: the newer marker is this node's own, and the partition stays."""
        partition = appender.log.partition
        if self._owned.get(partition) is not appender:
            log.info("cluster_stale_append_fenced", partition=partition, epoch=appender.epoch)
            return
        log.warning("cluster_partition_fenced", partition=partition)
        self._views[partition] = self._views[partition].deposed()
        self._set_gate(False)
