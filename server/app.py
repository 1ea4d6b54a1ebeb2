"""Build, start and stop the gRPC server: TimerService, TimerAdmin, health, reflection.

Why the synchronous gRPC server (a thread pool) rather than grpc.aio: every call ends in
the engine, whose API is blocking (group-commit futures, RocksDB reads); under asyncio
each would have to hop to an executor anyway, and the measured throughput comes from
batching (SendBatch, DeliveryBatch), not from cheaper per-call dispatch. The cost of the
sync server is one thread per open Subscribe stream, so streams run on a pool of their
own (timerwheel.server.stream_pool: `max_subscribers` threads, and `grpc_workers` more on which the
delivery hub refuses streams beyond `max_subscribers`), while unary calls run on
`grpc_workers` threads: subscribers can never take the threads unary calls need, and
unary calls never run 288 at once. Ack and Nack run on `settle_workers` threads of their
own (timerwheel.server.settle_pool), so a consumer's acks never wait behind queued sends.
Health and reflection, open to callers without a token, run on a small pool of their own
within budgets (timerwheel.server.stream_pool `Probes`): they cannot take the threads
Subscribe or unary calls need. Each pool takes at most its part of `max_concurrent_rpcs`
(timerwheel.wheels.call_room), shared fairly between callers: grpcio, which refuses every
caller once its own limit is reached, is given a limit above their sum.

Shutdown (`stop`, run on SIGTERM by `timerwheel serve`): health goes NOT_SERVING; the
delivery hub ends the Subscribe streams (un-acked messages stay in the store and are
delivered again after the restart); the gRPC server stops accepting calls and lets calls
in progress finish within `shutdown_grace_ms` (their writes are still being committed by
the running engine); then the engine drains its queue and closes RocksDB.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from timerwheel.cluster.api import ClusterApi
from timerwheel.cluster.gate import DeliveryGate
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings, index_dir
from timerwheel.console.http import ConsoleEndpoint, api_target
from timerwheel.delivery.api import DeliveryApi
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.api import FiredSource, TimerApi
from timerwheel.engine.engine import Engine
from timerwheel.engine.system_clock import SystemClock
from timerwheel.observability import metrics
from timerwheel.observability.metrics_http import MetricsEndpoint, ScrapeGauges
from timerwheel.security.fair_pool import FairPool, fair_pool
from timerwheel.security.guard import RequestGuard
from timerwheel.security.limits import ByteBudget, ReceiveGate, receive_gate
from timerwheel.security.protection import (
    UNPROTECTED,
    Protection,
    listen,
    load_protection,
    log_protection,
)
from timerwheel.security.read_timeout import ReadTimer
from timerwheel.security.settings import SecuritySettings
from timerwheel.server import reflection
from timerwheel.server.admin_service import TimerAdmin
from timerwheel.server.bulk_scatter import BulkScatter
from timerwheel.server.fan_in import FanIn
from timerwheel.server.forwarding import Forwarding
from timerwheel.server.id_scopes import IdScopes
from timerwheel.server.keepalive import keepalive_options
from timerwheel.server.memory import receive_options, return_freed_memory
from timerwheel.server.peers import peer_credentials
from timerwheel.server.rpc_metrics import RpcMetrics
from timerwheel.server.scatter import ClusterView, ScatterGather
from timerwheel.server.service import TimerService
from timerwheel.server.settle_pool import SettlePool
from timerwheel.server.stream_pool import Probes, StreamPool
from timerwheel.server.worker_health import WorkerHealth
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from timerwheel.wheels.call_room import call_room, stream_threads
from timerwheel.wheels.clock import Clock
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.server")

SERVICE_NAMES = tuple(service.full_name for service in pb.DESCRIPTOR.services_by_name.values())


def console_host(settings: Settings) -> str | None:
    """Where the web console listens; None when it is off."""
    return settings.console_host if settings.console_port >= 0 else None


def metrics_host(settings: Settings) -> str | None:
    """Where /metrics listens; None when it is off."""
    return settings.metrics_host if settings.metrics_port >= 0 else None


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


@dataclass(frozen=True)
class GrpcServer:
    """A built gRPC server, its health servicer and the thread pools its calls run on."""

    server: grpc.Server
    health: health.HealthServicer
    pools: tuple[ThreadPoolExecutor, ...]

    def stop(self, grace_s: float) -> None:
        """No new calls; those in progress finish within `grace_s`; then the pools'
        threads end (grpcio does not own the pools it is given, so nothing else ends them)."""
        self.server.stop(grace_s).wait()
        for pool in self.pools:
            pool.shutdown(wait=False)


def build_grpc_server(
    settings: Settings, engine: TimerApi, hub: DeliveryApi[Any], *, reuse_port: bool = False,
    stats_root_pid: int | None = None, protection: Protection = UNPROTECTED,
    worker: tuple[int, int] = (0, 1), owners: ClusterView | None = None,
    peer_credentials: grpc.ChannelCredentials | None = None,
) -> GrpcServer:  # fmt: skip
    """The gRPC server with every service on it, not yet bound: TimerService and TimerAdmin
    over `engine` and `hub` (in-process objects, or the remote ones of a worker process),
    health and reflection, behind the request guard (timerwheel.security.guard: tokens and roles
    from `protection`, undecodable requests).

    `reuse_port`: the worker processes of `timerwheel serve --workers N` all listen on one
    port (SO_REUSEPORT; the kernel spreads connections over them). Off otherwise, so a
    second server on a busy port fails instead of sharing it. `worker`: this server's
    (index, count) among them, which its health answers tell (timerwheel.server.worker_health).
    `owners`: a cluster node's partition owners; calls on another node's ids are forwarded
    there (timerwheel.server.forwarding), and List, Count and Topics gathered from every
    node (timerwheel.server.scatter), over TLS with `peer_credentials`
    (timerwheel.server.peers).
    """
    return_freed_memory()  # freed request bytes leave the process (timerwheel.server.memory)
    # Callers take the unary and settle threads in turn, none more than its share
    # (timerwheel.security.fair_pool): another token's call never waits behind a queue.
    # Each pool takes at most its part of max_concurrent_rpcs, and beyond refuses a call
    # of the caller holding the most (timerwheel.wheels.call_room).
    share = settings.caller_thread_share_percent
    queued = protection.security.max_queued_calls_per_caller  # beyond: refused at once
    room = call_room(settings)
    bound = f"its part of max_concurrent_rpcs={settings.max_concurrent_rpcs}"
    unary_pool = fair_pool(
        settings.grpc_workers, share, "grpc-unary", queued, room.unary, bound
    )  # fmt: skip
    # A stream beyond max_subscribers needs a thread too, to be refused on (the hub's
    # RESOURCE_EXHAUSTED): the streams' pool has grpc_workers threads more for those.
    threads = stream_threads(settings)
    stream_pool = FairPool(threads, threads, "grpc-stream", capacity=room.streams, bound=bound)
    settle_pool = fair_pool(
        settings.settle_workers, share, "grpc-settle", queued, room.settle, bound
    )  # fmt: skip
    # Health and reflection, which callers without a token reach: a small pool and budgets
    # of their own, so they can never take a thread TimerService needs.
    probes = Probes.of(settings)
    # The bytes of calls in progress, charged before a request is decoded (the guard) and
    # while a response is built (the service): one budget a process.
    budget = ByteBudget(settings.max_inflight_request_bytes, "max_inflight_request_bytes")
    server = grpc.server(
        unary_pool,
        # Never reached: the pools take at most max_concurrent_rpcs calls together, each
        # refusing its own fairly beyond its part; grpcio's refuses every caller alike.
        maximum_concurrent_rpcs=room.total + 1,
        options=[
            *receive_options(settings),  # what a request may hold before it is read
            *keepalive_options(settings),  # silent peers dropped (timerwheel.server.keepalive)
            ("grpc.max_send_message_length", -1),
            ("grpc.so_reuseport", 1 if reuse_port else 0),
        ],
        interceptors=interceptors(
            engine,
            protection,
            stream_pool,
            settle_pool,
            probes,
            budget,
            receive_gate(settings),
            ReadTimer(settings.request_read_timeout_ms),  # a request that never comes
            owners,
            peer_credentials,
        ),
    )
    cluster_map = owners.cluster_map if owners is not None else None
    service = TimerService(engine, hub, budget, cluster_map)
    pb_grpc.add_TimerServiceServicer_to_server(service, server)
    admin = TimerAdmin(engine, hub, protection.security, stats_root_pid)
    pb_grpc.add_TimerAdminServicer_to_server(admin, server)
    health_servicer = WorkerHealth(*worker)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    reflection.enable((*SERVICE_NAMES, health.SERVICE_NAME), server)  # v1 and v1alpha
    pools = (unary_pool, stream_pool, settle_pool, probes.pool)
    return GrpcServer(server, health_servicer, pools)


def interceptors(
    engine: TimerApi, protection: Protection,
    stream_pool: ThreadPoolExecutor, settle_pool: ThreadPoolExecutor, probes: Probes,
    budget: ByteBudget | None = None, gate: ReceiveGate | None = None,
    reads: ReadTimer | None = None, owners: ClusterView | None = None,
    peer_credentials: grpc.ChannelCredentials | None = None,
) -> list[grpc.ServerInterceptor]:  # fmt: skip
    """Outermost first. The pools before the guard: they wrap what the guard returns, so
    the pool they set is seen. The RPC metrics (only while metrics are on) before all:
    they count what the others answer too, and keep the pool those chose."""
    chain: list[grpc.ServerInterceptor] = [
        StreamPool(stream_pool, probes),
        SettlePool(settle_pool),
        RequestGuard(protection.tokens, engine.topic_of, budget, gate, reads),
    ]
    if owners is not None:
        check_sends = getattr(engine, "check_sends", None)  # ClusterApi's
        forwarding = Forwarding(owners, check_sends, peer_credentials)  # after the guard
        chain += [forwarding, FanIn(owners, forwarding), ScatterGather(owners, forwarding)]
        chain.append(BulkScatter(owners, forwarding))  # BulkCancel, Purge, Redrive
    if protection.tokens is not None:  # innermost: on the node that owns the ids
        chain.append(IdScopes(engine))
    recorder = metrics.recorder()
    if isinstance(recorder, metrics.Recorder):
        chain.insert(0, RpcMetrics(recorder))
    return chain


def set_serving(health_servicer: health.HealthServicer, serving: bool = True) -> None:
    """Every service name's health (the server's "" included): SERVING or NOT_SERVING."""
    status = health_pb2.HealthCheckResponse
    for name in ("", *SERVICE_NAMES):
        health_servicer.set(name, status.SERVING if serving else status.NOT_SERVING)


def cluster_engine_settings(settings: Settings) -> Settings:
    """A cluster node's engine: an index emptied at start, inside the data dir
    (timerwheel.cluster.node.index_dir); no fsync of its own: the partition's log is the
    durable copy, and a caller is answered only once a quorum has the change."""
    return replace(settings, data_dir=index_dir(settings.data_dir), sync_writes=False)


class TimerServer:
    """One service instance: engine + delivery hub + gRPC server, bound at construction.

    Security (docs/security.md) is checked before the store is opened: a non-loopback
    host without TLS and tokens (unless `insecure`), an unreadable certificate or token
    file, or a missing export root raise SettingsError and nothing is opened or bound.
    """

    def __init__(
        self,
        settings: Settings,
        clock: Clock | None = None,
        security: SecuritySettings | None = None,
        cluster: NodeSettings | None = None,
    ) -> None:
        self.settings = settings
        self.protection = load_protection(
            settings.host, security or SecuritySettings(), console_host(settings),
            metrics_host(settings),
        )  # fmt: skip
        clock = clock or SystemClock(settings.clock_offset_ms)
        if cluster is not None:  # the engine is the node's index, rebuilt from the log
            settings = self.settings = cluster_engine_settings(settings)
        self.engine = Engine(settings, clock)
        self.hub: DeliveryHub | None = None
        self.metrics: MetricsEndpoint | None = None
        self.console: ConsoleEndpoint | None = None
        self.node: ClusterNode | None = None
        try:
            api: TimerApi = self.engine
            source: FiredSource = self.engine
            if cluster is not None:
                self.node = ClusterNode(cluster, self.engine)
                api = ClusterApi(self.node)
                source = DeliveryGate(self.node, self.engine)
            self.hub = DeliveryHub(source, settings)
            if settings.metrics_port >= 0:
                self.metrics = self._serve_metrics()
            peers = None if cluster is None else peer_credentials(
                self.protection.security, cluster.peer_ca_file
            )  # fmt: skip
            self._grpc = build_grpc_server(
                settings, api, self.hub, protection=self.protection, owners=self.node,
                peer_credentials=peers,
            )  # fmt: skip
            self.health = self._grpc.health
            address = bind_address(settings.host, settings.port)
            self.port = listen(self._grpc.server, address, self.protection.security)
            if self.node is not None:
                assert cluster is not None
                self.node.start(cluster.advertised(settings.host, self.port))
            if settings.console_port >= 0:
                self.console = ConsoleEndpoint(
                    settings.console_host, settings.console_port,
                    api_target(settings.host, self.port), clock,
                )  # fmt: skip
        except BaseException:
            if self.console is not None:
                self.console.close()
            if self.metrics is not None:
                self.metrics.close()
            if self.node is not None:
                self.node.close()
            if self.hub is not None:
                self.hub.close()
            self.engine.close()
            raise
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    def _serve_metrics(self) -> MetricsEndpoint:
        """/metrics of this process (docs/metrics.md): metrics are turned on here."""
        metrics.enable()
        top = self.settings.metrics_top_topics
        cluster = self.node.cluster_map if self.node is not None else None
        gauges = ScrapeGauges(
            lambda: self.engine.metrics_gauges(top), self.hub.subscriber_count, cluster
        )
        return MetricsEndpoint(self.settings.metrics_host, self.settings.metrics_port, gauges)

    @property
    def target(self) -> str:
        """HOST:PORT a client on this machine dials."""
        return bind_address(self.settings.host, self.port)

    def start(self) -> TimerServer:
        self._grpc.server.start()
        set_serving(self.health)
        # A writer that stops for good (timerwheel.engine.store_health) leaves nothing to serve:
        # NOT_SERVING at once, so probes and load balancers see it; `failure` tells
        # `timerwheel serve` to exit non-zero, so the process gets restarted.
        self.engine.health.on_failed(self._writer_failed)
        log.info(
            "server_started", host=self.settings.host, port=self.port,
            data_dir=self.settings.data_dir, workers=self.settings.grpc_workers,
            max_subscribers=self.settings.max_subscribers,
        )  # fmt: skip
        log_protection(self.protection)
        return self

    def stop(self, grace_s: float | None = None) -> None:
        """Graceful stop (see the module docstring). Idempotent, safe from any thread."""
        with self._stop_lock:
            if self._stopped.is_set():
                return
            started = time.monotonic()
            grace_s = self.settings.shutdown_grace_ms / 1000 if grace_s is None else grace_s
            log.info("server_stopping", grace_s=grace_s)
            self.health.enter_graceful_shutdown()
            if self.console is not None:
                self.console.close()
            if self.node is not None:  # stop delivering, hand the leases to the standbys
                self.node.close()
            self.hub.close()
            self._grpc.stop(grace_s)
            if self.metrics is not None:
                self.metrics.close()
            self.engine.close()
            self._stopped.set()
            log.info("server_stopped", seconds=round(time.monotonic() - started, 3))

    def _writer_failed(self, reason: str) -> None:
        set_serving(self.health, serving=False)
        log.error("server_not_serving", reason=reason)

    @property
    def failure(self) -> str | None:
        """Why the server cannot go on (its writer stopped for good), or None."""
        return self.engine.health.failure

    def __enter__(self) -> TimerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
