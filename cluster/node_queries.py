"""What a cluster node answers about ownership, from its lease views and its appenders:
who owns an id's partition, where a call must go, and the map Stats and /metrics show
(docs/cluster.md, "Any node answers"). Read-only over the node's state: `ClusterNode`
mixes this in; nothing here changes a lease or the engine.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from typing import TYPE_CHECKING, Any

from timerwheel.cluster import journal
from timerwheel.cluster.appender import Appender, LogUnavailable, monotonic_ms
from timerwheel.cluster.errors import NoOwner, NotOwner
from timerwheel.cluster.lease import LeaseView, Verdict
from timerwheel.cluster.partitions import partition_of
from timerwheel.cluster.replication import NOT_READ, ReplicationWatch

if TYPE_CHECKING:
    from timerwheel.cluster.placement import Placement
    from timerwheel.cluster.settings import NodeSettings
    from timerwheel.cluster.standby import Standbys

JOURNAL_WAIT_S = 10.0  # a caller waits at most this for its entry to be in the log


class NodeQueries:
    node: NodeSettings
    holder: str
    address: str
    placement: Placement
    replication: ReplicationWatch
    standbys: Standbys
    takeovers: list
    _views: dict[int, LeaseView]
    _owned: dict[int, Appender]
    _taking: set[int]
    _purging: set[int]

    @property
    def gate_open(self) -> bool:
        raise NotImplementedError

    def partition_of(self, message_id: str) -> int:
        return partition_of(message_id, self.node.partitions)

    def owned(self) -> list[int]:
        now = monotonic_ms()
        return sorted(p for p in self._owned if self._views[p].verdict(now) is Verdict.OWN)

    def require_owner(self, partition: int) -> Appender:
        view = self._views[partition]
        appender = self._owned.get(partition)
        if appender is not None and view.verdict(monotonic_ms()) is Verdict.OWN:
            return appender
        seen = view.seen
        if seen is not None and seen.value.holder != self.holder:
            raise NotOwner(partition, seen.value.holder, seen.value.address, seen.epoch)
        raise NoOwner(f"partition {partition} has no owner at the moment; retry")

    def journal(self, partition: int, entries: list[journal.Entry]) -> Future:
        return self.require_owner(partition).submit(entries)

    @staticmethod
    def wait_logged(futures: Iterable[Future]) -> None:
        futures = list(futures)
        done, pending = wait_futures(futures, JOURNAL_WAIT_S)
        if pending:
            raise LogUnavailable("the partition log did not answer in time; retry")
        for future in done:
            future.result()

    def peer_addresses(self) -> list[str]:
        """Every other node that owns a partition, as this node last read the leases (the
        nodes a Subscribe is fanned in from: server.fan_in)."""
        return sorted({
            view.seen.value.address for view in self._views.values()
            if view.seen is not None and view.seen.value.holder != self.holder
            and view.seen.value.address and view.seen.value.address != self.address
        })  # fmt: skip

    def owner_address(self, message_id: str) -> str | None:
        """Where the id's partition is owned when that is another node (server.forwarding)."""
        partition = self.partition_of(message_id)
        if partition in self._owned:
            return None
        seen = self._views[partition].seen
        if seen is None or seen.value.holder == self.holder or not seen.value.address:
            return None
        return seen.value.address

    def cluster_map(self) -> dict[str, Any]:
        """Partition -> owner, address, epoch as this node last read them; its own role."""
        now = monotonic_ms()
        wall_ms = time.time_ns() // 1_000_000  # a snapshot's age: JetStream's stored time
        partitions = []
        for partition, view in sorted(self._views.items()):
            seen = view.seen
            appender = self._owned.get(partition)
            replication = self.replication.of(partition) if appender else NOT_READ
            standby = self.standbys.running.get(partition)
            snapshot_at = replication.snapshot_at_ms
            partitions.append({
                "partition": partition,
                "owner": seen.value.holder if seen else "",
                "address": seen.value.address if seen else "",
                "epoch": seen.epoch if seen else 0,
                "verdict": view.verdict(now).value,
                "appended": appender.appended if appender else 0,
                "last_sequence": appender.last_sequence if appender else 0,
                "stream_leader": replication.stream_leader,
                "replicas_current": replication.replicas_current,
                "replica_lag": replication.replica_lag,
                "standby_sequence": standby.through if standby and standby.fold is not None else 0,
                "standby_lag": standby.lag if standby else 0,
                "snapshot_sequence": replication.snapshot_through,
                "snapshot_age_ms": max(0, wall_ms - snapshot_at) if snapshot_at else 0,
            })  # fmt: skip
        return {
            "node": self.node.name, "holder": self.holder, "address": self.address,
            "partitions": self.node.partitions, "owned": self.owned(),
            "live_nodes": sorted(self.placement.live_nodes), "delivering": self.gate_open,
            "takeovers": len(self.takeovers), "map": partitions,
        }  # fmt: skip

    def settled_partitions(self) -> list[int] | None:
        """The partitions whose timers this node's engine holds, and no others; None while
        one is being restored or purged (its timers are partly there: a List or Count of
        this node's engine would be wrong for it). Scatter-gather: server.scatter."""
        if self._taking or self._purging:
            return None
        return sorted(list(self._owned))

    def held_partitions(self) -> set[int]:
        """The partitions whose appender this node holds (their verdicts may be STOP)."""
        return set(self._owned)

    def owns(self, partition: int) -> bool:
        """This node holds the partition's appender (its verdict may still be STOP)."""
        return partition in self._owned
