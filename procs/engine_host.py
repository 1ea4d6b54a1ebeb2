"""The engine process of `timerwheel serve --workers N`: the engine, and nothing else.

It owns RocksDB and the single writer (the loop that cascades and fires). Worker and
delivery processes call it over `timerwheel.procs.ipc`, one thread per connection, with work that is
already done elsewhere: `submit_sends_many` takes sends a worker validated and encoded
(`SendOp`s: each its own request, carried together by the worker's `SendFunnel`), so here
they are only unpickled and queued for the writer; cancels, acks, reads and
fired-message fetches are single engine calls. No gRPC server, protobuf or
delivery bookkeeping runs in this process, so the writer shares its GIL only with these
short calls (docs/architecture.md has the measured costs).

`wait_fired` is a long poll for the topics that fired since the last call: the delivery
process's replacement for the in-process fired-listener. It has one consumer (the
delivery process); a restarted consumer starts with every topic dirty anyway.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from multiprocessing.connection import Connection

import structlog

from timerwheel.common import TimerwheelError
from timerwheel.engine.engine import Engine
from timerwheel.engine.send_op import SendOp
from timerwheel.engine.system_clock import SystemClock
from timerwheel.observability import metrics
from timerwheel.procs.admission_cell import AdmissionPublisher, cell_path
from timerwheel.procs.gil import set_switch_interval
from timerwheel.procs.heap import prepare_heap_for_serving
from timerwheel.procs.ipc import CallContext, CallServer, PackedError, pack_error
from timerwheel.procs.lifecycle import become_child, wait_for_stop
from timerwheel.procs.send_funnel import Answer
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.engine_host")

# The engine methods other processes may call, by name: what `RemoteEngine` (the
# `EngineApi` of a worker or the delivery process) and the supervisor's metrics scrape
# ask for. Anything else is refused, so lifecycle, manual stepping and the send entry
# points that would validate and encode here (workers send `submit_sends_many`) cannot be
# reached, and a method added to the engine crosses only when it is added here.
REMOTE_CALLS = frozenset(
    {"now_ms", "cancel", "reschedule", "get", "list_pending", "count", "topic_of", "stats",
     "topics", "fire_lateness", "export", "ready_topics", "fetch_fired_raw",
     "delivery_options_of", "bulk_cancel", "redrive", "pause_series",
     "ack", "unacked", "dead_letter", "record_trace", "delivery_attempts", "metrics_gauges"}
)  # fmt: skip


class EngineHost:
    """Answers calls from other processes with the engine's methods."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine
        self._cond = threading.Condition()
        self._fired: set[str] = set()
        self._closed = False
        engine.add_fired_listener(self._on_fired)

    def _on_fired(self, topics: set[str]) -> None:
        with self._cond:
            self._fired |= topics
            self._cond.notify_all()

    def handle(self, method: str, args: tuple, context: CallContext) -> object:
        if method == "submit_sends_many":
            return self._submit_sends_many(*args)
        if method == "wait_fired":
            return self._wait_fired(*args)
        if method not in REMOTE_CALLS:
            raise AttributeError(f"engine method {method!r} is not callable remotely")
        return getattr(self._engine, method)(*args)

    def _submit_sends_many(self, ops: list[SendOp]) -> list[Answer]:
        """Every op queued for the writer before any is waited for, so they share its
        next group commit; each answered alone: its results, or its own error."""
        for op in ops:
            if not isinstance(op, SendOp):
                raise TypeError(f"submit_sends_many takes SendOps, not {type(op).__name__}")
        queued: list[Future | PackedError] = []
        for op in ops:
            try:
                queued.append(self._engine.submit_sends(op))
            except TimerwheelError as exc:  # refused before queuing (Overloaded)
                queued.append(pack_error(exc))
        return [_answer(op, item) for op, item in zip(ops, queued, strict=True)]

    def _wait_fired(self, timeout_s: float) -> set[str]:
        with self._cond:
            self._cond.wait_for(lambda: self._fired or self._closed, timeout_s)
            topics, self._fired = self._fired, set()
        return topics

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


def _answer(op: SendOp, item: Future | PackedError) -> Answer:
    if not isinstance(item, Future):
        return (False, item)
    try:
        return (True, op.packed_results(item.result()))
    except TimerwheelError as exc:
        return (False, pack_error(exc))


def run_engine_process(
    settings: Settings, socket_path: str, authkey: bytes, parent_pid: int,
    log_args: tuple[str, str], metrics_dir: str | None, ready: Connection,
) -> None:  # fmt: skip
    """Entry point of the engine process (multiprocessing, spawn); with `metrics_dir`,
    its metrics go to the supervisor through that directory (timerwheel.observability.metrics)."""
    from timerwheel.observability.log_config import configure_logging

    stop = become_child(parent_pid)
    if metrics_dir is not None:
        metrics.enable(metrics_dir)
    configure_logging(*log_args)
    try:
        engine = Engine(settings, SystemClock(settings.clock_offset_ms))
    except Exception as exc:
        ready.send(("failed", f"{type(exc).__name__}: {exc}"))
        raise SystemExit(1) from exc
    host = EngineHost(engine)
    admission = AdmissionPublisher(cell_path(socket_path))  # read by the workers
    engine.set_admission_listener(admission.publish)
    server = CallServer(socket_path, authkey, host.handle, "engine")
    ready.send(("ready", {}))
    log.info("engine_process_ready", socket=socket_path)
    prepare_heap_for_serving()
    set_switch_interval(settings.gil_switch_interval_ms)
    try:
        stopped = wait_for_stop(stop, parent_pid, engine.writer_running)
    finally:
        server.close()
        host.close()
        engine.close()
        admission.close()
    if not stopped:
        reason = engine.health.failure or "the writer stopped or the supervisor is gone"
        log.error("engine_process_exiting", reason=reason, exit_code=1)
        raise SystemExit(1)
