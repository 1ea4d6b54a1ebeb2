"""A gRPC worker process of `timerwheel serve --workers N`: the RPC layer, and only it.

Each worker runs the same gRPC server (TimerService, TimerAdmin, health, reflection) on the
shared port (SO_REUSEPORT: the kernel spreads connections over the workers). Protobuf
decoding, validation, id choice and record encoding happen here, in parallel across
workers; the engine process receives ready-to-write batches
(`timerwheel.procs.remote_engine.RemoteEngine`) and the delivery process hands out fired messages
(`timerwheel.procs.remote_hub.RemoteHub`).

SIGTERM: health NOT_SERVING, this worker's Subscribe streams end (their messages stay with
the delivery hub), calls in progress finish within the grace period, then it exits.
"""

from __future__ import annotations

from multiprocessing.connection import Connection

import structlog

from timerwheel.engine.system_clock import SystemClock
from timerwheel.observability import metrics
from timerwheel.procs.admission_cell import AdmissionReader, cell_path
from timerwheel.procs.gil import set_switch_interval
from timerwheel.procs.heap import prepare_heap_for_serving
from timerwheel.procs.ipc import CallClient
from timerwheel.procs.lifecycle import become_child, wait_for_stop
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.procs.remote_hub import RemoteHub
from timerwheel.security.protection import Protection, listen
from timerwheel.server.app import bind_address, build_grpc_server, set_serving
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.worker")


def run_worker_process(
    settings: Settings, index: int, engine_path: str, delivery_path: str, authkey: bytes,
    parent_pid: int, log_args: tuple[str, str], protection: Protection,
    metrics_dir: str | None, ready: Connection,
) -> None:  # fmt: skip
    """Entry point of worker `index` (multiprocessing, spawn). `protection` was loaded and
    checked by `timerwheel serve` before any process started (timerwheel.security.protection)."""
    from timerwheel.observability.log_config import configure_logging

    stop = become_child(parent_pid)
    if metrics_dir is not None:  # refusals are counted here (timerwheel.observability.metrics)
        metrics.enable(metrics_dir)
    configure_logging(*log_args)
    engine = RemoteEngine(
        settings,
        CallClient(engine_path, authkey, "engine"),
        SystemClock(settings.clock_offset_ms),
        AdmissionReader(
            cell_path(engine_path), settings.admit_fire_lag_ms, settings.admit_due_load_pct
        ),
    )
    hub = RemoteHub(delivery_path, authkey)
    built = build_grpc_server(
        settings, engine, hub, reuse_port=True, stats_root_pid=parent_pid,
        protection=protection, worker=(index, settings.workers),
    )  # fmt: skip
    server, health = built.server, built.health
    address = bind_address(settings.host, settings.port)
    try:
        port = listen(server, address, protection.security)
    except Exception as exc:  # OSError, or TLS files changed since the start's check
        ready.send(("failed", str(exc)))
        raise SystemExit(1) from exc
    server.start()
    set_serving(health)
    ready.send(("ready", {"port": port}))
    log.info("worker_ready", worker=index, port=port)
    prepare_heap_for_serving()
    set_switch_interval(settings.gil_switch_interval_ms)
    try:
        stopped = wait_for_stop(stop, parent_pid)
    finally:
        health.enter_graceful_shutdown()
        hub.close()
        built.stop(settings.shutdown_grace_ms / 1000)
        hub.disconnect()
        engine.close()
    if not stopped:
        raise SystemExit(1)
