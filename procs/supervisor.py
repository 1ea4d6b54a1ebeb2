"""`timerwheel serve --workers N`: start the server's processes, watch them, stop them in order.

    supervisor ──spawns──> engine process     RocksDB + the single writer
    (timerwheel.procs.engine_host)
               ├─────────> delivery process   the DeliveryHub (timerwheel.procs.delivery_host)
               └─────────> N worker processes gRPC on the shared port (timerwheel.procs.worker)

The supervisor serves no RPC itself (only /metrics and the web console, when asked). It
checks the port is free (a plain bind, so a second server on a busy port fails here with
a clear message), starts the engine first (it takes RocksDB's lock: a second server on
the same data dir fails here too), then the delivery process, then the workers, each
reporting ready or failed on a pipe. It logs `server_started` when every worker listens.

The children's unix sockets and metrics files are in a runtime dir (timerwheel.procs.runtime_dir),
removed when the supervisor stops; one left by a SIGKILLed supervisor is removed by the
next supervisor that starts with the same temporary directory.

A child that exits unexpectedly is started again (`child_restarted`); each kind has its
own restart budget, and a child that keeps failing stops the server with exit code 1.
Children die with the supervisor (timerwheel.procs.lifecycle), so a SIGKILLed supervisor leaves no
orphans; nothing acknowledged is lost, because the engine answers only durable writes.

Shutdown (SIGTERM, SIGINT): workers first (their calls in progress finish against the
running engine), then the delivery process, then the engine, which drains its queue and
closes RocksDB.
"""

from __future__ import annotations

import multiprocessing
import os
import secrets
import socket
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait

import structlog

from timerwheel.console.http import ConsoleEndpoint, api_target
from timerwheel.engine.system_clock import SystemClock
from timerwheel.observability.metrics_http import MetricsEndpoint, ScrapeGauges
from timerwheel.procs.delivery_host import run_delivery_process
from timerwheel.procs.engine_host import run_engine_process
from timerwheel.procs.ipc import CallClient
from timerwheel.procs.lifecycle import SignalStop
from timerwheel.procs.runtime_dir import RuntimeDir
from timerwheel.procs.worker import run_worker_process
from timerwheel.security.protection import UNPROTECTED, Protection
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.supervisor")

START_TIMEOUT_S = 60.0  # a child that is not ready by then failed to start
RESTARTS_ALLOWED = 5  # per kind of child, within RESTART_WINDOW_S
RESTART_WINDOW_S = 60.0
ENGINE_STOP_S = 120.0  # draining the writer queue and closing RocksDB
CHILD_STOP_S = 15.0  # delivery; workers get the shutdown grace on top


class StartFailed(Exception):
    """The server could not start: the message says why, for a person."""


@dataclass
class Child:
    kind: str  # "engine", "delivery" or "worker"
    index: int
    target: Callable[..., None]
    args: tuple
    process: multiprocessing.process.BaseProcess | None = None
    restarts: deque[float] = field(default_factory=deque)

    @property
    def name(self) -> str:
        return self.kind if self.kind != "worker" else f"worker-{self.index}"


def check_port(host: str, port: int) -> int:
    """The port to serve on (a free one for 0), checked free with a bind as gRPC's own.

    With SO_REUSEADDR, as gRPC and the HTTP endpoints bind: a live listener still refuses
    the probe, but the previous server's connections waiting out TIME_WAIT (a minute
    after it was killed or stopped with clients connected) do not, or a restart after a
    crash would be refused for that minute on a port gRPC would take."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host.strip("[]"), port))
        except OSError as exc:
            raise StartFailed(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
        return probe.getsockname()[1]


class Supervisor:
    def __init__(
        self, settings: Settings, workers: int, log_args: tuple[str, str],
        protection: Protection = UNPROTECTED,
    ) -> None:  # fmt: skip
        self._context = multiprocessing.get_context("spawn")
        self.port = check_port(settings.host, settings.port)
        if settings.metrics_port > 0:
            check_port(settings.metrics_host, settings.metrics_port)
        if settings.console_port > 0:
            check_port(settings.console_host, settings.console_port)
        settings = settings.replace(port=self.port)
        # Made once the ports are known free, so a refused start leaves nothing behind.
        self._runtime, swept = RuntimeDir.create()
        if swept:
            log.info("runtime_dirs_removed", reason="their supervisor is dead", paths=swept)
        engine_path = self._runtime.join("engine.sock")
        delivery_path = self._runtime.join("delivery.sock")
        authkey = secrets.token_bytes(32)
        pid = os.getpid()
        self.settings = settings
        # Metrics: every child writes its counters to prometheus_client's multiprocess
        # files here; this process serves /metrics from them
        # (timerwheel.observability.metrics_http).
        metrics_dir = None
        if settings.metrics_port >= 0:
            metrics_dir = self._runtime.join("metrics")
            os.mkdir(metrics_dir)
        self._metrics_dir = metrics_dir
        self._calls = (CallClient(engine_path, authkey, "engine"),
                       CallClient(delivery_path, authkey, "delivery"))  # fmt: skip
        self.metrics: MetricsEndpoint | None = None
        self.console: ConsoleEndpoint | None = None
        self._children = [
            Child("engine", 0, run_engine_process,
                  (settings, engine_path, authkey, pid, log_args, metrics_dir)),
            Child("delivery", 0, run_delivery_process,
                  (settings, engine_path, delivery_path, authkey, pid, log_args, metrics_dir)),
            *(Child("worker", index, run_worker_process,
                    (settings, index, engine_path, delivery_path, authkey, pid, log_args,
                     protection, metrics_dir))
              for index in range(workers)),
        ]  # fmt: skip
        self._stopping = threading.Event()

    # == starting ============================================================================
    def start(self) -> Supervisor:
        """Start every child in order; StartFailed (with everything stopped) if one fails."""
        try:
            for child in self._children:
                self._start(child)
            if self._metrics_dir is not None:
                self.metrics = self._serve_metrics()
            if self.settings.console_port >= 0:
                self.console = self._serve_console()
        except BaseException:
            self._stop_all()
            raise
        log.info(
            "server_started", host=self.settings.host, port=self.port,
            data_dir=self.settings.data_dir, workers=self.worker_count,
            pids={child.name: child.process.pid for child in self._children},
        )  # fmt: skip
        return self

    def _serve_metrics(self) -> MetricsEndpoint:
        """/metrics: the children's counters from their files, the gauges asked of the
        engine and delivery processes at each scrape."""
        engine, delivery = self._calls
        top = self.settings.metrics_top_topics
        gauges = ScrapeGauges(
            lambda: engine.call("metrics_gauges", top), lambda: delivery.call("subscriber_count")
        )
        host, port = self.settings.metrics_host, self.settings.metrics_port
        try:
            return MetricsEndpoint(host, port, gauges, multiprocess_dir=self._metrics_dir)
        except OSError as exc:
            raise StartFailed(str(exc)) from exc

    def _serve_console(self) -> ConsoleEndpoint:
        """The web console, here: it calls the workers on the shared port, as clients do."""
        settings = self.settings
        target = api_target(settings.host, self.port)
        clock = SystemClock(settings.clock_offset_ms)
        try:
            return ConsoleEndpoint(settings.console_host, settings.console_port, target, clock)
        except OSError as exc:
            raise StartFailed(str(exc)) from exc

    @property
    def worker_count(self) -> int:
        return sum(child.kind == "worker" for child in self._children)

    def pids(self) -> dict[str, int]:
        return {c.name: c.process.pid for c in self._children if c.process is not None}

    def _start(self, child: Child) -> None:
        receiver, sender = self._context.Pipe(duplex=False)
        process = self._context.Process(
            target=child.target, args=(*child.args, sender), name=f"timerwheel-{child.name}"
        )
        process.start()
        sender.close()
        child.process = process
        status, detail = self._wait_ready(child, receiver)
        receiver.close()
        if status != "ready":
            process.join(timeout=5)
            raise StartFailed(f"{child.name} process failed to start: {detail}")

    def _wait_ready(self, child: Child, receiver: Connection) -> tuple[str, object]:
        ready = wait([receiver, child.process.sentinel], timeout=START_TIMEOUT_S)
        if receiver in ready:
            try:
                return receiver.recv()
            except EOFError:
                pass
        if not ready:
            child.process.kill()
            return "failed", f"not ready after {START_TIMEOUT_S:.0f} s"
        child.process.join(timeout=5)
        return "failed", f"exited with code {child.process.exitcode}"

    # == watching ============================================================================
    def run(self, stop: SignalStop) -> int:
        """Watch the children until `stop` is set; restart those that exit. The exit code."""
        while not stop.is_set():
            sentinels = {child.process.sentinel: child for child in self._children}
            for sentinel in wait(list(sentinels), timeout=0.5):
                child = sentinels[sentinel]
                if stop.is_set():
                    break
                if not self._restart(child):
                    return 1
        return 0

    def _restart(self, child: Child) -> bool:
        code = child.process.exitcode
        now = time.monotonic()
        while child.restarts and now - child.restarts[0] > RESTART_WINDOW_S:
            child.restarts.popleft()
        if len(child.restarts) >= RESTARTS_ALLOWED:
            log.error("child_failing", child=child.name, exit_code=code, restarts=RESTARTS_ALLOWED)
            return False
        child.restarts.append(now)
        log.warning("child_exited", child=child.name, pid=child.process.pid, exit_code=code)
        try:
            self._start(child)
        except StartFailed as exc:
            log.error("child_restart_failed", child=child.name, error=str(exc))
            return self._restart(child)
        log.info("child_restarted", child=child.name, pid=child.process.pid)
        return True

    # == stopping ============================================================================
    def stop(self) -> None:
        log.info("server_stopping", grace_s=self.settings.shutdown_grace_ms / 1000)
        started = time.monotonic()
        self._stop_all()
        log.info("server_stopped", seconds=round(time.monotonic() - started, 3))

    def _stop_all(self) -> None:
        """SIGTERM in order (workers, delivery, engine), each kind waited for; stragglers are
        SIGKILLed so nothing outlives the supervisor. Idempotent."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self.console is not None:
            self.console.close()
        if self.metrics is not None:
            self.metrics.close()
        for calls in self._calls:
            calls.close()
        grace_s = self.settings.shutdown_grace_ms / 1000
        for kind, timeout_s in (
            ("worker", grace_s + CHILD_STOP_S), ("delivery", CHILD_STOP_S),
            ("engine", ENGINE_STOP_S),
        ):  # fmt: skip
            group = [c for c in self._children if c.kind == kind and c.process is not None]
            for child in group:
                if child.process.is_alive():
                    child.process.terminate()
            deadline = time.monotonic() + timeout_s
            for child in group:
                child.process.join(timeout=max(deadline - time.monotonic(), 0))
                if child.process.is_alive():
                    log.error("child_killed", child=child.name, after_s=timeout_s)
                    child.process.kill()
                    child.process.join(timeout=5)
        self._runtime.remove()
