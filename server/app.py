"""Build, start and stop the gRPC server: TimerService, TimerAdmin, health, reflection.

Why the synchronous gRPC server (a thread pool) rather than grpc.aio: every call ends in
the engine, whose API is blocking (group-commit futures, RocksDB reads); under asyncio
each would have to hop to an executor anyway, and the measured throughput comes from
batching (SendBatch, DeliveryBatch), not from cheaper per-call dispatch. The cost of the
sync server is one thread per open Subscribe stream, so the pool is sized
`grpc_workers + max_subscribers` and the delivery hub refuses streams beyond
`max_subscribers`: subscribers can never take the threads unary calls need.

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

import grpc
import structlog
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from engine.engine import Engine
from engine.system_clock import SystemClock
from server.admin_service import TimerAdmin
from server.delivery import DeliveryHub
from server.service import TimerService
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from wheels.clock import Clock
from wheels.settings import Settings

log = structlog.get_logger("timerwheel.server")

SERVICE_NAMES = tuple(service.full_name for service in pb.DESCRIPTOR.services_by_name.values())


def bind_address(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host and not host.startswith("[") else f"{host}:{port}"


class TimerServer:
    """One service instance: engine + delivery hub + gRPC server, bound at construction."""

    def __init__(self, settings: Settings, clock: Clock | None = None) -> None:
        self.settings = settings
        self.engine = Engine(settings, clock or SystemClock())
        self.hub: DeliveryHub | None = None
        try:
            self.hub = DeliveryHub(self.engine, settings)
            self._grpc = self._build_grpc()
            address = bind_address(settings.host, settings.port)
            try:
                self.port = self._grpc.add_insecure_port(address)
            except RuntimeError as exc:
                raise OSError(f"cannot listen on {address}: {exc}") from exc
        except BaseException:
            if self.hub is not None:
                self.hub.close()
            self.engine.close()
            raise
        self._stopped = threading.Event()
        self._stop_lock = threading.Lock()

    def _build_grpc(self) -> grpc.Server:
        settings = self.settings
        pool = ThreadPoolExecutor(
            max_workers=settings.grpc_workers + settings.max_subscribers,
            thread_name_prefix="grpc",
        )
        server = grpc.server(
            pool,
            options=[
                ("grpc.max_receive_message_length", settings.max_request_bytes),
                ("grpc.max_send_message_length", -1),
                ("grpc.so_reuseport", 0),  # a second server on a busy port must fail
            ],
        )
        pb_grpc.add_TimerServiceServicer_to_server(TimerService(self.engine, self.hub), server)
        pb_grpc.add_TimerAdminServicer_to_server(TimerAdmin(self.engine, self.hub), server)
        self.health = health.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self.health, server)
        reflection.enable_server_reflection(
            (*SERVICE_NAMES, health.SERVICE_NAME, reflection.SERVICE_NAME), server
        )
        return server

    @property
    def target(self) -> str:
        """HOST:PORT a client on this machine dials."""
        return bind_address(self.settings.host, self.port)

    def start(self) -> TimerServer:
        self._grpc.start()
        for name in ("", *SERVICE_NAMES):
            self.health.set(name, health_pb2.HealthCheckResponse.SERVING)
        log.info(
            "server_started", host=self.settings.host, port=self.port,
            data_dir=self.settings.data_dir, workers=self.settings.grpc_workers,
            max_subscribers=self.settings.max_subscribers,
        )  # fmt: skip
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
            self.hub.close()
            self._grpc.stop(grace_s).wait()
            self.engine.close()
            self._stopped.set()
            log.info("server_stopped", seconds=round(time.monotonic() - started, 3))

    def wait_stopped(self, timeout_s: float | None = None) -> bool:
        return self._stopped.wait(timeout_s)

    def __enter__(self) -> TimerServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
