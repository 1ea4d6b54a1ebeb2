"""A cluster node: the single node's engine as the index of the partitions this node owns,
their leases, their logs, and the engine's API routed by partition (docs/cluster.md).

    gRPC front ──TimerApi──> ClusterNode ──(owned partition)──> Engine (local index)
                                  │                                  │ applied, then
                                  │                                  ▼
                                  └──── Appender(p) ──publish──> JetStream tw.p<N>.log
    delivery hub ──FiredSource──> DeliveryGate ──> Engine    (closed unless every lease is OWN)

A change is applied to the local engine first, then its entry is appended to the
partition's log, and the caller is answered only once the log has it: so the log holds
everything a caller was told, and a node that dies between the two left only its own
index ahead of the log, and that index is never reused (a node's engine starts empty at
every start: `index_dir`). A node that takes a partition over writes its epoch marker,
folds the partition's whole log (`timerwheel.cluster.journal.Fold`) and sends the live
timers into its engine; timers already due fire at once.

Ownership is `timerwheel.cluster.lease` over the NATS lease bucket, stepped every
`tick_ms` by one task on the node's NATS loop. A partition whose preferred node (highest
crc32 of "<node>:<partition>" among the live nodes) is another live node is left to it
for `takeover_grace_ms`, so partitions spread over the nodes that are up.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import secrets
import shutil
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import structlog

from timerwheel.cluster import journal
from timerwheel.cluster.appender import Appender, LogUnavailable, monotonic_ms
from timerwheel.cluster.fencing import EpochMarker, MarkerStep, marker_step
from timerwheel.cluster.lease import (
    Create,
    LeaseTerms,
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
    DEFAULT_PARTITIONS,
    check_partition_count,
    partition_of,
    preferred_node,
    with_partition,
)
from timerwheel.common import SendResult, State
from timerwheel.engine.ids import MessageIds
from timerwheel.wheels.bulk import BulkResult, RedriveResult, TimerFilter
from timerwheel.wheels.domain import (
    FailedPrecondition,
    InvalidArgument,
    SendSpec,
    ShuttingDown,
    Timer,
    When,
)
from timerwheel.wheels.lateness import LatenessMinute
from timerwheel.wheels.settings import Settings, SettingsError
from timerwheel.wheels.validation import validate_message_ref, validate_sends

if TYPE_CHECKING:
    from timerwheel.engine.api import TimerApi
    from timerwheel.engine.engine import Engine
    from timerwheel.engine.series import SeriesPause
    from timerwheel.store.export import ExportSummary

log = structlog.get_logger("timerwheel.cluster")

END_OF_TIME_MS = 1 << 47  # beyond any deliver time a timer may have (year 6429)
RESTORE_CHUNK = 1_000  # sends per engine batch while a takeover restores a partition
JOURNAL_WAIT_S = 10.0  # a caller waits at most this for its entry to be in the log


class NotOwner(FailedPrecondition):
    """The call names an id of a partition another node owns: the message names it, so a
    client can go there (`timerwheel.Client` does)."""

    def __init__(self, partition: int, holder: str, address: str, epoch: int) -> None:
        super().__init__(
            f"not owner of partition {partition}: owner is {holder} at {address}, epoch {epoch}"
        )
        self.partition = partition
        self.address = address


class NoOwner(ShuttingDown):
    """The partition has no owner at this moment (a takeover is under way): UNAVAILABLE,
    so the caller retries."""


@dataclass(frozen=True)
class NodeSettings:
    """How this node joins the cluster; validated once, the bad value in the message."""

    name: str
    nats_urls: tuple[str, ...]
    partitions: int = DEFAULT_PARTITIONS
    replicas: int = 3
    lease: LeaseTerms = field(default_factory=LeaseTerms)
    tick_ms: int = 100
    call_timeout_ms: int = 2_000
    takeover_grace_ms: int = 3_000

    def __post_init__(self) -> None:
        if not self.name or "/" in self.name or "." in self.name:
            raise SettingsError(f"node name {self.name!r}: non-empty, without '/' or '.'")
        if not self.nats_urls:
            raise SettingsError("cluster: at least one NATS url (--cluster nats://host:4222)")
        try:
            check_partition_count(self.partitions)
        except ValueError as error:
            raise SettingsError(str(error)) from error
        if self.replicas not in (1, 3, 5):
            raise SettingsError(f"replicas {self.replicas}: 1, 3 or 5")
        if not 10 <= self.tick_ms <= self.lease.renew_every_ms:
            raise SettingsError(
                f"tick_ms {self.tick_ms}: 10 to the renewal interval "
                f"({self.lease.renew_every_ms} ms)"
            )


def index_dir(data_dir: str) -> str:
    """Where a cluster node keeps its engine: emptied at every start (the log is the truth;
    what an earlier process left may be ahead of it)."""
    path = Path(data_dir) / "cluster-index"
    shutil.rmtree(path, ignore_errors=True)
    return str(path)


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
        self._ids = MessageIds()
        self._round_robin = itertools.count()
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
        self.takeovers: list[Takeover] = []
        self._loop: LoopThread | None = None
        self._task: Future | None = None

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
            self._loop.run(self._release_all(), 5.0)
        except Exception as error:
            log.warning("cluster_release_failed", error=str(error))
        if self._task is not None:
            self._task.cancel()
        with contextlib.suppress(Exception):
            self._loop.run(self._nc.close(), 5.0)
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
        writer refusing for a moment must not leave the partition's timers here)."""
        self._purging.add(partition)
        try:
            for attempt in range(1, 100):
                try:
                    self._purge_engine(partition)
                    return
                except Exception as error:
                    log.error("cluster_purge_failed", partition=partition, error=repr(error))
                    time.sleep(min(0.05 * attempt, 1.0))
        finally:
            self._purging.discard(partition)

    def _purge_engine(self, partition: int) -> None:
        count = self.node.partitions
        for topic, _, _ in self.engine.topics():
            token = ""
            while True:
                timers, token = self.engine.list_pending(
                    topic, 0, END_OF_TIME_MS, 1000, token, False
                )
                for timer in timers:
                    if partition_of(timer.message_id, count) == partition:
                        with contextlib.suppress(Exception):
                            self.engine.cancel(timer.message_id)
                if not token:
                    break
            after = 0
            while True:
                rows = self.engine.fetch_deliveries(topic, after, 1000)
                if not rows:
                    break
                after = rows[-1].seq
                mine = [
                    r.message_id for r in rows if partition_of(r.message_id, count) == partition
                ]
                if mine:
                    self.engine.ack(topic, mine)

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

    # == TimerApi =========================================================================
    def now_ms(self) -> int:
        return self.engine.now_ms()

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        specs = list(specs)
        for index, spec in enumerate(specs):
            if spec.options is not None and spec.options.repeat is not None:
                name = "repeat" if len(specs) == 1 else f"messages[{index}].repeat"
                raise InvalidArgument(
                    name, "<a recurring series>", "recurring series are not served in cluster "
                    "mode yet; send one-shot timers"
                )  # fmt: skip
        deliver_times = validate_sends(specs, self.engine.now_ms(), self.settings)
        owned = self.owned()
        named: list[SendSpec] = []
        partitions: list[int] = []
        made = [i for i, spec in enumerate(specs) if not spec.message_id]
        home = owned[next(self._round_robin) % len(owned)] if owned else None
        new_ids = self._ids.take([deliver_times[i] for i in made]) if made else []
        made_ids = dict(zip(made, new_ids, strict=True))
        for index, spec in enumerate(specs):
            if spec.message_id:
                partition = self.partition_of(spec.message_id)
            else:
                if home is None:
                    raise NoOwner("this node owns no partition at the moment; retry")
                partition = home
                spec = spec._replace(message_id=with_partition(made_ids[index], home))
            named.append(spec)
            partitions.append(partition)
        for partition in sorted(set(partitions)):
            self.require_owner(partition)
        result: Future = Future()
        stored = self.engine.send_batch_async(named)

        def stored_done(done: Future) -> None:
            try:
                results: list[SendResult] = done.result()
                by_partition: dict[int, list[journal.Entry]] = {}
                for spec, partition, sent in zip(named, partitions, results, strict=True):
                    if not sent.existed:
                        entry = journal.sent_of(spec, sent.message_id, sent.deliver_at_ms)
                        by_partition.setdefault(partition, []).append(entry)
                logged = [self.journal(p, entries) for p, entries in by_partition.items()]
            except BaseException as error:
                result.set_exception(error)
                return
            _when_all(logged, result, results)

        stored.add_done_callback(stored_done)
        return result

    def cancel(self, message_id: str) -> State:
        validate_message_ref(message_id)
        partition = self.partition_of(message_id)
        self.require_owner(partition)
        state = self.engine.cancel(message_id)
        self.wait_logged([self.journal(partition, [journal.Cancelled((message_id,))])])
        return state

    def reschedule(self, message_id: str, when: When) -> int:
        validate_message_ref(message_id)
        partition = self.partition_of(message_id)
        self.require_owner(partition)
        deliver_at_ms = self.engine.reschedule(message_id, when)
        entry = journal.Rescheduled(message_id, deliver_at_ms)
        self.wait_logged([self.journal(partition, [entry])])
        return deliver_at_ms

    def get(self, message_id: str, include_trace: bool = False) -> Timer:
        validate_message_ref(message_id)
        self.require_owner(self.partition_of(message_id))
        return self.engine.get(message_id, include_trace)

    def topic_of(self, message_id: str) -> str | None:
        """The id's topic if this node owns its partition; None otherwise (the request
        guard then leaves the topic check to the owner the call is forwarded to)."""
        if self.partition_of(message_id) not in self._owned:
            return None
        return self.engine.topic_of(message_id)

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

    def bulk_cancel(
        self, timer_filter: TimerFilter, limit: int = 0, page_token: str = "",
        purge: bool = False,
    ) -> BulkResult:  # fmt: skip
        raise FailedPrecondition(
            "BulkCancel and Purge are not served in cluster mode yet: cancel by id"
        )

    def redrive(
        self, dlq_topic: str, timer_filter: TimerFilter, limit: int = 0, page_token: str = ""
    ) -> RedriveResult:
        raise FailedPrecondition("Redrive is not served in cluster mode yet")

    def pause_series(self, series_id: str, paused: bool) -> SeriesPause:
        name = "PauseSeries" if paused else "ResumeSeries"
        raise FailedPrecondition(f"{name} is not served in cluster mode yet")

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = "",
        include_body: bool = True,
    ) -> tuple[list[Timer], str]:  # fmt: skip
        return self.engine.list_pending(topic, from_ms, to_ms, limit, page_token, include_body)

    def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> tuple[int, int, int]:
        return self.engine.count(topic, from_ms, to_ms)

    def stats(self) -> dict[str, Any]:
        stats = dict(self.engine.stats())
        stats["cluster"] = self.cluster_map()
        return stats

    def topics(self) -> list[tuple[str, int, int]]:
        return self.engine.topics()

    def fire_lateness(self) -> list[LatenessMinute]:
        return self.engine.fire_lateness()

    def export(
        self, out_dir: str, max_rows_per_file: int = 0, reserve_bytes: int = 0
    ) -> ExportSummary:
        return self.engine.export(out_dir, max_rows_per_file, reserve_bytes)

    def cluster_map(self) -> dict[str, Any]:
        """Partition -> owner, address, epoch as this node last read them; its own role."""
        now = monotonic_ms()
        partitions = []
        for partition, view in sorted(self._views.items()):
            seen = view.seen
            appender = self._owned.get(partition)
            partitions.append({
                "partition": partition,
                "owner": seen.value.holder if seen else "",
                "address": seen.value.address if seen else "",
                "epoch": seen.epoch if seen else 0,
                "verdict": view.verdict(now).value,
                "appended": appender.appended if appender else 0,
                "last_sequence": appender.last_sequence if appender else 0,
            })  # fmt: skip
        return {
            "node": self.node.name, "holder": self.holder, "address": self.address,
            "partitions": self.node.partitions, "owned": self.owned(),
            "live_nodes": sorted(self._live_nodes), "delivering": self.gate_open,
            "takeovers": len(self.takeovers), "map": partitions,
        }  # fmt: skip


def _when_all(futures: list[Future], result: Future, value: object) -> None:
    """Complete `result` with `value` once every future is done, or with the first error."""
    if not futures:
        result.set_result(value)
        return
    remaining = [len(futures)]
    lock = threading.Lock()

    def one_done(done: Future) -> None:
        error = done.exception()
        with lock:
            remaining[0] -= 1
            if result.done():
                return
            if error is not None:
                result.set_exception(error)
            elif remaining[0] == 0:
                result.set_result(value)

    for future in futures:
        future.add_done_callback(one_done)


def _is_a_timer_api(node: ClusterNode) -> TimerApi:
    return node  # the type checker holds ClusterNode to TimerApi, method by method
