"""A cluster node: the leases of its partitions, their logs and their takeovers, with the
single node's engine as the index of the partitions it owns (docs/cluster.md).

    ClusterApi (cluster/api.py) ──owned? require_owner, journal──> ClusterNode
                                                                      │ Appender(p)
                                                                      ▼
                                                     JetStream tw.p<N>.log (fenced appends)
    delivery hub ──FiredSource──> DeliveryGate ──> Engine   (closed unless every lease is OWN)

A node that takes a partition over writes its epoch marker, folds the partition's whole
log (`timerwheel.cluster.journal.Fold`) and sends the live timers into its engine (which
starts empty at every start: `timerwheel.cluster.settings.index_dir`); timers already due
fire at once. A node that gives one up retires its timers from the engine
(`timerwheel.cluster.purge`).

Ownership is `timerwheel.cluster.lease` over the NATS lease bucket, stepped every
`tick_ms` by one task on the node's NATS loop. A partition whose preferred node (highest
crc32 of "<node>:<partition>" among the live nodes) is another live node is left to it
for `takeover_grace_ms`, so partitions spread over the nodes that are up; an owner hands
a partition to its preferred node once that node has been up for the grace.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import structlog

from timerwheel.cluster import journal
from timerwheel.cluster.appender import Appender, LogUnavailable, monotonic_ms
from timerwheel.cluster.errors import NoOwner, NotOwner
from timerwheel.cluster.fencing import EpochMarker, MarkerStep, marker_step
from timerwheel.cluster.lease import (
    Create,
    LeaseView,
    Read,
    Release,
    Renew,
    Request,
    Verdict,
)
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
from timerwheel.cluster.partitions import (
    partition_of,
    preferred_node,
)
from timerwheel.cluster.purge import purge_partition
from timerwheel.cluster.replication import NOT_READ, ReplicationWatch
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.domain import (
    SendSpec,
)
from timerwheel.wheels.settings import Settings, SettingsError

if TYPE_CHECKING:
    from timerwheel.engine.engine import Engine

log = structlog.get_logger("timerwheel.cluster")

CLOSE_STEP_S = 3.0  # each step of a node's stop (leases handed back, NATS closed) at most
RESTORE_CHUNK = 1_000  # sends per engine batch while a takeover restores a partition
JOURNAL_WAIT_S = 10.0  # a caller waits at most this for its entry to be in the log


@dataclass
class Takeover:
    partition: int
    epoch: int
    records: int
    live: int
    seconds: float
    at_ms: int


class ClusterNode:
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
        self._absent_since: dict[int, int] = {}
        self._live_nodes: set[str] = {node.name}
        self._node_seen_at: dict[str, int] = {}
        self._last_hand_off_ms = -(10**12)
        self._listeners: list[Callable[[list[str]], None]] = []
        self._gate_open = True
        self._starved = False
        self._closing = False
        self._lock = threading.Lock()
        # Held while the delivery gate retires fired rows of partitions given up, and while
        # a takeover starts: rows that a restore makes fire must never be taken for rows of
        # a partition given up (DeliveryGate.fetch_deliveries).
        self.retire_lock = threading.Lock()
        self.takeovers: list[Takeover] = []
        self._loop: LoopThread | None = None
        self._task: Future | None = None
        self.replication = ReplicationWatch(None)  # its streams' replicas (owned partitions)

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
            raise
        self._task = self._loop.submit(self._lease_loop())
        log.info(
            "cluster_node_started", node=self.node.name, holder=self.holder, address=address,
            partitions=self.node.partitions,
        )  # fmt: skip
        return self

    async def _connect(self) -> None:
        self._nc = await connect(list(self.node.nats_urls), self.holder)
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
        self._store = NatsLeaseStore(
            self._loop, await lease_bucket(js, ttl, self.node.replicas),  # type: ignore[arg-type]
            self.node.call_timeout_ms / 1000,
        )  # fmt: skip
        # A node vanishes from the registry two renewals after its last put: sooner than
        # its leases expire, so its partitions' next preferred node is known when they do.
        registry_ttl = 2 * self.node.lease.renew_every_ms
        self._nodes_kv = await node_bucket(js, registry_ttl, self.node.replicas)
        self._logs = {p: PartitionLog(js, p, self.node.replicas) for p in self._views}
        for partition_log in self._logs.values():
            await partition_log.ensure()

    def close(self) -> None:
        """Stop firing and delivering, hand every lease back (a standby takes each at once),
        disconnect."""
        if self._loop is None or self._closing:
            return
        self._closing = True
        self._set_gate(False)
        try:
            self._loop.run(self._release_all(), CLOSE_STEP_S)
        except Exception as error:
            log.warning("cluster_release_failed", error=str(error))
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            self._loop.run(self._nc.close(), CLOSE_STEP_S)
        self._loop.close()

    async def _release_all(self) -> None:
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
        registered_at = -(10**12)
        while not self._closing:
            now = monotonic_ms()
            if now - registered_at >= self.node.lease.renew_every_ms:
                registered_at = now
                await self._register()
            await asyncio.gather(*(self._step_safely(p, now) for p in list(self._views)))
            self._check_gate()
            self.replication.tick(now, self.held_partitions)  # off this path: a task
            await asyncio.sleep(self.node.tick_ms / 1000)

    async def _register(self) -> None:
        try:
            await self._nodes_kv.put(self.node.name, self.address.encode())
            keys = await self._nodes_kv.keys()
            self._live_nodes = set(keys) | {self.node.name}
            now = monotonic_ms()
            for name in self._live_nodes:
                self._node_seen_at.setdefault(name, now)
            for name in list(self._node_seen_at):
                if name not in self._live_nodes:
                    del self._node_seen_at[name]
        except Exception:
            pass

    def preferred(self, partition: int) -> str:
        """The live node a partition goes to first (rendezvous hashing: a node joining or
        leaving moves only its own share)."""
        return preferred_node(partition, self._live_nodes)

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
                if answer is None:
                    self._absent_since.setdefault(partition, now)
                else:
                    self._absent_since.pop(partition, None)
            if after.held is not None:
                self._absent_since.pop(partition, None)  # held: the next absence starts anew
            if isinstance(request, Create) and after.held is not None:
                log.info("cluster_lease_taken", partition=partition, epoch=after.held.epoch)
        view = self._views[partition]
        if partition in self._owned and self._should_hand_off(partition, now):
            await self._hand_off(partition, now)
            return
        if view.needs_marker() and partition not in self._taking and not view.releasing:
            with self.retire_lock:
                self._taking.add(partition)
            task = asyncio.ensure_future(self._take_over(partition))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        if view.held is None and partition in self._owned:
            await self._lose(partition, "lease lost")

    def _should_hand_off(self, partition: int, now: int) -> bool:
        """Give a partition to its preferred node once that node has been up for the grace
        (so a node that joins, or comes back from a restart, gets its share), one
        partition per renewal interval."""
        preferred = self.preferred(partition)
        if preferred == self.node.name or self._closing or self._taking:
            return False
        if now - self._last_hand_off_ms < self.node.lease.renew_every_ms:
            return False
        return now - self._node_seen_at.get(preferred, now) >= self.node.takeover_grace_ms

    async def _hand_off(self, partition: int, now: int) -> None:
        """Stop delivering the partition, let its appends finish, delete the lease (the
        preferred node takes it at its next read), and drop its timers from the engine."""
        self._last_hand_off_ms = now
        view = self._views[partition]
        if view.held is None:
            return
        self._views[partition] = view.release()
        self._set_gate(False)
        appender = self._owned.pop(partition)
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
        self._absent_since[partition] = monotonic_ms()  # the grace starts now, for this node too
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
        if self.preferred(partition) == self.node.name:
            return True
        since = self._absent_since.get(partition, now)
        return now - since >= self.node.takeover_grace_ms

    # == taking a partition over ==========================================================
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
            if step is MarkerStep.WRITE:
                written = await partition_log.write_marker(
                    EpochMarker(epoch, self.holder, self.address), last_seq
                )
                if written is None:
                    return  # another marker got there: the next tick reads again
                last_seq = written
            through = await partition_log.last_sequence()
            records = await partition_log.read_log(0, through)
            fold = journal.Fold()
            for _, data in records:
                fold.apply(journal.decode(data))
            not_before = self.engine.now_ms() - self.settings.max_past_ms + 60_000
            specs = fold.specs(not_before)
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self._restore, specs)
            view = self._views[partition]
            if view.held is None or view.held.epoch != epoch:
                await loop.run_in_executor(None, self._purge, partition)
                return
            self._views[partition] = view.fenced(last_seq)
            self._owned[partition] = Appender(
                partition_log, epoch, last_seq, loop, functools.partial(self._deadline, partition),
                monotonic_ms, self._fenced,
            )  # fmt: skip
            takeover = Takeover(
                partition, epoch, fold.records, len(specs), time.monotonic() - started,
                self.engine.now_ms(),
            )  # fmt: skip
            self.takeovers.append(takeover)
            log.info(
                "cluster_partition_owned", partition=partition, epoch=epoch,
                records_replayed=fold.records, live=len(specs),
                seconds=round(takeover.seconds, 3),
            )  # fmt: skip
            self._check_gate()
        except Exception as error:
            log.warning("cluster_takeover_failed", partition=partition, error=repr(error))
        finally:
            self._taking.discard(partition)

    def _deadline(self, partition: int) -> int | None:
        return self._views[partition].deadline_ms()

    def _restore(self, specs: list[SendSpec]) -> None:
        for start in range(0, len(specs), RESTORE_CHUNK):
            self.engine.send_batch(specs[start : start + RESTORE_CHUNK])

    def _fenced(self, partition: int) -> None:
        """An append was refused: a newer epoch owns it; give it up at once."""
        log.warning("cluster_partition_fenced", partition=partition)
        self._views[partition] = self._views[partition].deposed()
        self._set_gate(False)

    async def _lose(self, partition: int, reason: str) -> None:
        appender = self._owned.pop(partition, None)
        if appender is not None:
            appender.close()
        log.warning("cluster_partition_lost", partition=partition, reason=reason)
        self._purging.add(partition)
        self._set_gate(False)
        await asyncio.get_running_loop().run_in_executor(None, self._purge, partition)
        self._check_gate()

    def _purge(self, partition: int) -> None:
        """Remove a partition's timers from the local engine (another node owns them now).
        Until it is done the node neither delivers nor takes the partition again: a restore
        running beside it would see its timers retired. Retried until it succeeds (a
        writer refusing for a moment must not leave the partition's timers here), unless
        the node is stopping (its engine closes; the next start begins empty)."""
        self._purging.add(partition)
        try:
            for attempt in range(1, 100):
                if self._closing:  # the engine closes with the node: nothing left to purge
                    return
                try:
                    purge_partition(self.engine, partition, self.node.partitions)
                    return
                except Exception as error:
                    log.error("cluster_purge_failed", partition=partition, error=repr(error))
                    time.sleep(min(0.05 * attempt, 1.0))
        finally:
            self._purging.discard(partition)

    # == the delivery gate ================================================================
    def deliverable(self) -> bool:
        """May this node deliver now: every lease it holds is OWN and no takeover is
        restoring (a partition whose deadline passed must not deliver, and one engine
        holds them all)."""
        if self._closing or self._taking or self._purging:
            return False
        now = monotonic_ms()
        return all(
            view.verdict(now) is Verdict.OWN
            for view in self._views.values()
            if view.held is not None
        )

    def _check_gate(self) -> None:
        self._set_gate(self.deliverable())
        if self._starved and self.gate_open:  # a fetch was refused in a brief lapse
            self._starved = False
            self._wake_hub()

    def starved(self) -> None:
        """A fetch found the gate closed (perhaps only for a moment, between two ticks of
        the lease loop): the next tick that finds it open wakes the hub."""
        self._starved = True

    def _wake_hub(self) -> None:
        topics = self.engine.ready_topics()
        for listener in list(self._listeners):
            listener(topics)

    def _set_gate(self, open_: bool) -> None:
        with self._lock:
            changed = open_ != self._gate_open
            self._gate_open = open_
        if changed:
            log.info("cluster_delivery", open=open_)
            if open_:
                self._wake_hub()

    @property
    def gate_open(self) -> bool:
        """Read at every fetch, on the lease clock: a node resumed after a pause must not
        deliver before its lease loop has run again."""
        return self._gate_open and self.deliverable()

    def add_gate_listener(self, listener: Callable[[list[str]], None]) -> None:
        self._listeners.append(listener)

    # == routing ==========================================================================
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
        partitions = []
        for partition, view in sorted(self._views.items()):
            seen = view.seen
            appender = self._owned.get(partition)
            replication = self.replication.of(partition) if appender else NOT_READ
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
            })  # fmt: skip
        return {
            "node": self.node.name, "holder": self.holder, "address": self.address,
            "partitions": self.node.partitions, "owned": self.owned(),
            "live_nodes": sorted(self._live_nodes), "delivering": self.gate_open,
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
