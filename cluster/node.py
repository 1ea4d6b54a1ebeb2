"""A cluster node: the leases of its partitions, their logs and their takeovers, with the
single node's engine as the index of the partitions it owns (docs/cluster.md).

    ClusterApi (cluster/api.py) ──owned? require_owner, journal──> ClusterNode
                                                                      │ Appender(p)
                                                                      ▼
                                                     JetStream tw.p<N>.log (fenced appends)
    delivery hub ──FiredSource──> DeliveryGate ──> Engine   (closed unless every lease is OWN)

A node that takes a partition over writes its epoch marker, loads the partition's latest
snapshot and folds the log above it (`timerwheel.cluster.snapshot_io`), and sends the live
timers into its engine (which starts empty at every start:
`timerwheel.cluster.settings.index_dir`); timers already due fire at once. An owner
snapshots a partition once the log above its snapshot passes the node's `SnapshotTerms`
(`timerwheel.cluster.rebuild.SnapshotSchedule`); a partition whose snapshot is missing or
damaged is refused (its lease given back), never served in part. A node that gives one up
retires its timers from the engine (`timerwheel.cluster.purge`).

Ownership is `timerwheel.cluster.lease` over the NATS lease bucket, stepped every
`tick_ms` by one task on the node's NATS loop. Where partitions go is
`timerwheel.cluster.placement`; whether the node may deliver, `timerwheel.cluster.gate_state`;
what it answers about ownership (routing, the cluster map), `timerwheel.cluster.node_queries`.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import threading
from concurrent.futures import Future
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog

from timerwheel.cluster import journal
from timerwheel.cluster.appender import Appender, monotonic_ms
from timerwheel.cluster.gate_state import GateState
from timerwheel.cluster.lease import (
    Create,
    LeaseView,
    Read,
    Release,
    Renew,
    Request,
)
from timerwheel.cluster.lease_watch import LeaseWatch
from timerwheel.cluster.nats_io import (
    ClusterConfig,
    LoopThread,
    NatsLeaseStore,
    PartitionLog,
    agree_config,
    connect,
    lease_bucket,
    node_bucket,
)
from timerwheel.cluster.node_gate import NodeGate
from timerwheel.cluster.node_queries import NodeQueries
from timerwheel.cluster.placement import Placement
from timerwheel.cluster.purge import purge_until_done
from timerwheel.cluster.rebuild import SnapshotSchedule, Takeover
from timerwheel.cluster.replication import ReplicationWatch
from timerwheel.cluster.series_log import SeriesLog
from timerwheel.cluster.settings import NodeSettings
from timerwheel.cluster.snapshot_io import PartitionSnapshots, snapshot_store
from timerwheel.cluster.standby import Standbys
from timerwheel.cluster.takeover import Takeovers
from timerwheel.wheels.settings import Settings, SettingsError

if TYPE_CHECKING:
    from timerwheel.engine.engine import Engine

log = structlog.get_logger("timerwheel.cluster")

CLOSE_STEP_S = 3.0  # each step of a node's stop (leases handed back, NATS closed) at most


class ClusterNode(NodeGate, SeriesLog, Takeovers, NodeQueries):
    """`TimerApi` over the partitions this node owns (see the module docstring)."""

    def __init__(self, node: NodeSettings, engine: Engine) -> None:
        self.node = node
        self.engine = engine
        self.settings: Settings = engine.settings
        self.holder = f"{node.name}/{secrets.token_hex(4)}"
        self.address = ""
        self._views: dict[int, LeaseView] = {}
        self._owned: dict[int, Appender] = {}
        self._taking: set[int] = set()
        self._purging: set[int] = set()  # given up, its timers still leaving the engine
        self._tasks: set[asyncio.Future] = set()
        self._stepping: dict[int, asyncio.Future] = {}  # each partition's step under way
        self.placement = Placement(node.name, node.lease.renew_every_ms, node.takeover_grace_ms)
        self.snapshots = SnapshotSchedule(node.snapshot, monotonic_ms)
        self.standbys = Standbys({})  # the partitions this node would take next, kept warm
        self._gate = GateState(self.closed_reason, lambda: self.engine.ready_topics(), monotonic_ms)
        self._closing = False
        # Held while the gate retires fired rows of partitions given up, and while a takeover
        # starts: a restore's rows are never taken for those (DeliveryGate.fetch_deliveries).
        self.retire_lock = threading.Lock()
        self.takeovers: list[Takeover] = []
        self._loop: LoopThread | None = None
        self._task: Future | None = None
        self._watch_task: Future | None = None
        self.replication = ReplicationWatch(None)  # its streams' replicas (owned partitions)
        self._init_series_log()
        engine.add_series_listener(self.on_series_changes)  # each series change logged

    # == lifecycle ========================================================================
    def start(self, address: str) -> ClusterNode:
        """Connect, agree the cluster's config, make the streams and buckets, and start
        stepping the leases. Raises SettingsError on a config other nodes disagree with."""
        self.address = address
        self._views = {
            p: LeaseView(p, self.holder, self.node.lease, address)
            for p in range(self.node.partitions)
        }
        self._loop = LoopThread(f"cluster-{self.node.name}")
        try:
            self._loop.run(self._connect(), 60.0)
        except BaseException:
            self._loop.close()
            self._loop = None  # nothing for close() to release: the error stays the one seen
            raise
        self._task = self._loop.submit(self._lease_loop())
        self._watch_task = self._loop.submit(self.lease_watch.run(lambda: self._closing))
        log.info(
            "cluster_node_started", node=self.node.name, holder=self.holder, address=address,
            partitions=self.node.partitions,
        )  # fmt: skip
        return self

    async def _connect(self) -> None:
        self._nc = await connect(list(self.node.nats_urls), self.holder, self.node)
        js = self._nc.jetstream(timeout=self.node.call_timeout_ms / 1000)
        self._js = js
        self.replication = ReplicationWatch(js)
        agreed = await agree_config(js, ClusterConfig(self.node.partitions, self.node.replicas))
        if agreed != ClusterConfig(self.node.partitions, self.node.replicas):
            raise SettingsError(
                f"partitions {self.node.partitions}, replicas {self.node.replicas}: the cluster "
                f"was created with partitions {agreed.partitions}, replicas {agreed.replicas}"
            )
        ttl = self.node.lease.ttl_ms
        leases = await lease_bucket(js, ttl, self.node.replicas)
        self._store = NatsLeaseStore(
            self._loop, leases, self.node.call_timeout_ms / 1000,  # type: ignore[arg-type]
        )  # fmt: skip
        # Silent for five renewal intervals while nodes renew every one: the watch is dead.
        self.lease_watch = LeaseWatch(leases, self._lease_gone, 5 * self.node.lease.renew_every_ms)
        # A node vanishes from the registry two renewals after its last put: sooner than
        # its leases expire, so its partitions' next preferred node is known when they do.
        registry_ttl = 2 * self.node.lease.renew_every_ms
        self._nodes_kv = await node_bucket(js, registry_ttl, self.node.replicas)
        self._logs = {p: PartitionLog(js, p, self.node.replicas) for p in self._views}
        for partition_log in self._logs.values():
            await partition_log.ensure()
        store = await snapshot_store(js, self.node.replicas)
        self._snaps = {p: PartitionSnapshots(self._logs[p], store) for p in self._views}
        self.standbys = Standbys(self._snaps)

    def close(self) -> None:
        """Stop firing and delivering, hand every lease back (a standby takes each at once),
        disconnect."""
        if self._loop is None or self._closing:
            return
        self._closing = True
        self._set_gate(False, "closing")
        try:
            self._loop.run(self._release_all(), CLOSE_STEP_S)
        except Exception as error:
            log.warning("cluster_release_failed", error=str(error))
        for task in (self._task, self._watch_task):
            if task is not None:
                task.cancel()
        self._loop.loop.call_soon_threadsafe(self.snapshots.cancel)
        with contextlib.suppress(Exception):
            self._loop.run(self._nc.close(), CLOSE_STEP_S)
        self._loop.close()

    async def _release_all(self) -> None:
        for step in self._stepping.values():  # a renewal after the release keeps the lease
            step.cancel()
        await asyncio.gather(*self._stepping.values(), return_exceptions=True)
        for appender in list(self._owned.values()):
            appender.close()
        self._owned.clear()
        calls = []
        for partition, view in self._views.items():
            if view.held is not None:
                self._views[partition] = view.release()
                calls.append(self._store.delete_async(view.key, view.held.revision))
        await asyncio.gather(*calls, return_exceptions=True)

    # == the lease loop ===================================================================
    async def _lease_loop(self) -> None:
        """Every tick until the node stops; what a tick raises is logged and the next runs
        (ended, the loop would renew no lease, silently). Nothing waits in front of the
        renewals: the registry's calls (`_register`) and the steps (`_tick`) are tasks."""
        registered_at = last_ms = -(10**12)
        registering: asyncio.Future | None = None
        try:
            while not self._closing:
                now = monotonic_ms()
                if last_ms >= 0 and now - last_ms > self.node.lease.renew_every_ms:
                    # a renewal due meanwhile went out late: a starved loop lapses leases
                    log.warning("cluster_lease_loop_late", late_ms=now - last_ms)
                last_ms = now
                try:
                    if now - registered_at >= self.node.lease.renew_every_ms:
                        registered_at = now
                        registering = await self._register(registering, now)
                    await self._tick(now)
                except Exception as error:
                    log.error("cluster_lease_tick_failed", error=repr(error))
                await asyncio.sleep(self.node.tick_ms / 1000)
        finally:
            if registering is not None:
                registering.cancel()

    async def _register(self, running: asyncio.Future | None, now: int) -> asyncio.Future:
        """The registry's put and reads, which wait seconds while NATS elects that bucket's
        leader: the first awaited (the first tick's `may_take` needs the live nodes), later
        ones started beside the ticks unless the last still runs."""
        first = running is None
        if running is None or running.done():
            call = self.placement.register(self._nodes_kv, self.address, now, journal.VERSION)
            running = asyncio.ensure_future(call)
            if first:
                await running
        return running

    def _lease_gone(self, partition: int) -> None:
        """The lease watch heard the partition's lease expire or be given back: read it at
        the next tick, not at the next interval (cluster/lease_watch.py)."""
        view = self._views.get(partition)
        if view is not None:
            self._views[partition] = view.key_changed()

    async def _tick(self, now: int) -> None:
        """Each partition's step a task, one at a time a partition, never awaited here: a
        call waiting out its timeout (a read routed to a cut-off server) holds none back."""
        for partition in list(self._views):
            if partition not in self._stepping or self._stepping[partition].done():
                self._stepping[partition] = asyncio.ensure_future(self._step_safely(partition, now))
        self._check_gate()
        self.replication.tick(now, self.held_partitions)  # off this path: a task
        self.snapshots.tick(self._owned, self._snaps)  # off this path: tasks
        if not self._closing:
            self.standbys.keep(self._standing_by())  # off this path: tasks

    def _standing_by(self) -> list[int]:
        """The partitions this node would take next and does not hold (timerwheel.cluster
        .standby): their owner as last read, or none. None is started for a lease not yet
        read (a node's first ticks, whose steps are still under way): its owner decides."""
        mine = []
        for partition, view in self._views.items():
            if partition in self._owned:
                continue
            taking = view.held is not None or partition in self._taking
            if partition in self.standbys.running and (taking or view.seen is None):
                mine.append(partition)  # its takeover takes it; or stays warm, owner gone
                continue
            if taking or (view.seen is None and not view.absent):
                continue
            owner = view.seen.value.holder.split("/", 1)[0] if view.seen is not None else None
            if owner is not None:
                self.placement.owner_seen(partition, owner)  # its warm standby takes it at once
            if self.placement.standby(partition, owner) == self.node.name:
                mine.append(partition)
        return mine

    def preferred(self, partition: int) -> str:
        """The live node a partition goes to first (`Placement.preferred`)."""
        return self.placement.preferred(partition)

    async def _step_safely(self, partition: int, now: int) -> None:
        """One partition's step; whatever it raises is logged, never the end of the loop
        (every other partition's lease depends on it)."""
        try:
            await self._step(partition, now)
        except Exception as error:
            log.error("cluster_step_failed", partition=partition, error=repr(error))

    async def _step(self, partition: int, now: int) -> None:
        for _ in range(2):  # a read that finds the key absent leads to a create
            view = self._views[partition]
            request = view.plan(now)
            if request is None:
                break
            if isinstance(request, Create) and not self._may_take(partition, now):
                break
            try:
                answer = await asyncio.wait_for(
                    self._call(request), self.node.call_timeout_ms / 1000
                )
            except Exception:
                self._views[partition] = self._views[partition].unanswered(request)
                break
            before = self._views[partition]
            after = before.answered(request, answer)
            self._views[partition] = after
            if isinstance(request, Read):
                self.placement.read(partition, answer is not None, now)
            if after.held is not None:
                self.placement.held(partition)  # held: the next absence starts anew
            if isinstance(request, Create) and after.held is not None:
                log.info("cluster_lease_taken", partition=partition, epoch=after.held.epoch)
        view = self._views[partition]
        if partition in self._owned and self._should_hand_off(partition, now):
            await self._hand_off(partition, now)
            return
        if partition in self._owned and (view.held is None or view.needs_marker()):
            # Lost; or its own lease read back (a renewal refused as an unanswered one had
            # landed): never a takeover beside the live appender; given up, taken anew.
            await self._lose(partition, "lease lost" if view.held is None else "lease re-read")
            return
        if view.needs_marker() and partition not in self._taking and not view.releasing:
            with self.retire_lock:
                self._taking.add(partition)
            task = asyncio.ensure_future(self._take_over(partition))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _should_hand_off(self, partition: int, now: int) -> bool:
        """Give a partition to its preferred node (`Placement.should_hand_off`), never
        while stopping or while a takeover restores."""
        if self._closing or self._taking:
            return False
        return self.placement.should_hand_off(partition, now)

    async def _hand_off(self, partition: int, now: int) -> None:
        """Stop delivering the partition, let its appends finish, delete the lease (the
        preferred node takes it at its next read), and drop its timers from the engine."""
        self.placement.handing_off(now)
        view = self._views[partition]
        if view.held is None:
            return
        self._views[partition] = view.release()
        self._set_gate(False, "partition handed off")
        appender = self._owned.pop(partition)
        self.snapshots.dropped(partition)
        appender.close()
        await appender.drained()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(
                self._store.delete_async(view.key, view.held.revision),
                self.node.call_timeout_ms / 1000,
            )
        self._views[partition] = self._views[partition].answered(
            Release(view.key, view.held.revision), True
        )
        self._views[partition] = replace(self._views[partition], releasing=False)
        self.placement.handed_off(partition, monotonic_ms())
        self._purging.add(partition)
        log.info("cluster_partition_handed_off", partition=partition, to=self.preferred(partition))
        await asyncio.get_running_loop().run_in_executor(None, self._purge, partition)
        self._check_gate()

    async def _call(self, request: Request) -> Any:
        store = self._store
        if isinstance(request, Read):
            return (await store.get_async(request.key))[0]
        if isinstance(request, Create):
            return await store.create_async(request.key, request.value)
        if isinstance(request, Renew):
            return await store.update_async(request.key, request.value, request.expected_revision)
        assert isinstance(request, Release)
        return await store.delete_async(request.key, request.expected_revision)

    def _may_take(self, partition: int, now: int) -> bool:
        if self._closing or partition in self._purging:
            return False
        return self.placement.may_take(partition, now)

    async def _lose(self, partition: int, reason: str) -> None:
        self.snapshots.dropped(partition)
        appender = self._owned.pop(partition, None)
        if appender is not None:
            appender.close()
        log.warning("cluster_partition_lost", partition=partition, reason=reason)
        self._purging.add(partition)
        self._set_gate(False, "partition leaving")
        await asyncio.get_running_loop().run_in_executor(None, self._purge, partition)
        self._check_gate()

    def _purge(self, partition: int) -> None:
        """Remove a partition's timers from the local engine. Until done the node neither
        delivers nor takes the partition again (a restore beside it would see its timers
        retired). Retried until it succeeds (a writer refusing for a moment must not leave
        them here), unless the node stops (its engine closes; the next start is empty)."""
        self._purging.add(partition)
        try:
            purge_until_done(
                self.engine, partition, self.node.partitions, lambda: self._closing
            )  # fmt: skip
        finally:
            self._purging.discard(partition)
