"""The delivery process of `timerwheel serve --workers N`: one `DeliveryHub` for all workers.

Queue semantics need one place that knows who holds what: every Subscribe stream of a
topic, on whichever worker process it landed, draws from the same dispatcher. That hub
runs here, in a process of its own, so its threads (dispatch, ack-deadline expiry) never
take the engine's GIL; it reads fired messages from the engine process and acks there.

Workers reach it through `timerwheel.procs.remote_hub.RemoteHub`. A subscriber is known here by a
number; when the connection it was made on ends (the worker's stream thread, or the whole
worker, is gone), its in-flight messages are redelivered at once, as when a stream ends.
"""

from __future__ import annotations

import itertools
import threading
from multiprocessing.connection import Connection

import structlog

from timerwheel.delivery.hub import DeliveryHub, Subscriber
from timerwheel.delivery.subscriber import DeliveryRow, as_rows
from timerwheel.engine.system_clock import SystemClock
from timerwheel.observability import metrics
from timerwheel.procs.gil import set_switch_interval
from timerwheel.procs.heap import prepare_heap_for_serving
from timerwheel.procs.ipc import CallClient, CallContext, CallServer
from timerwheel.procs.lifecycle import become_child, wait_for_stop
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.delivery_host")


class DeliveryHost:
    """Answers workers' calls with the hub's methods; subscribers by number."""

    def __init__(self, hub: DeliveryHub) -> None:
        self._hub = hub
        self._lock = threading.Lock()
        self._numbers = itertools.count(1)
        self._subscribers: dict[int, Subscriber] = {}
        self._by_connection: dict[CallContext, set[int]] = {}

    def handle(self, method: str, args: tuple, context: CallContext) -> object:
        if method == "subscribe":
            return self._subscribe(context, *args)
        if method == "next_batch":
            return self._next_batch(*args)
        if method == "close_subscriber":
            subscriber = self._subscribers.get(args[0])
            if subscriber is not None:
                subscriber.close()
            return None
        if method == "release":
            self._release(args[0])
            return None
        if method in (
            "ack", "nack", "unacked", "subscriber_count", "write_trace", "in_flight",
            "consumers", "oldest_fired_at",
        ):  # fmt: skip
            return getattr(self._hub, method)(*args)
        raise AttributeError(f"delivery method {method!r} is not callable remotely")

    def _subscribe(
        self, context: CallContext, topic: str, max_in_flight: int, identity: str = "",
        name: str = "",
    ) -> int:  # fmt: skip
        subscriber = self._hub.subscribe(topic, max_in_flight, identity, name)
        number = next(self._numbers)
        with self._lock:
            self._subscribers[number] = subscriber
            if context not in self._by_connection:
                self._by_connection[context] = set()
                context.on_close(lambda: self._connection_closed(context))
            self._by_connection[context].add(number)
        return number

    def _next_batch(self, number: int, timeout_s: float) -> list[DeliveryRow] | None:
        """The hub's next batch as rows: the worker decodes the records (see remote_hub)."""
        subscriber = self._subscribers.get(number)
        if subscriber is None:
            return None  # released meanwhile: the stream ends
        batch = self._hub.next_batch(subscriber, timeout_s)
        return None if batch is None else as_rows(batch)

    def _release(self, number: int) -> None:
        with self._lock:
            subscriber = self._subscribers.pop(number, None)
            for numbers in self._by_connection.values():
                numbers.discard(number)
        if subscriber is not None:
            self._hub.release(subscriber)

    def _connection_closed(self, context: CallContext) -> None:
        with self._lock:
            numbers = self._by_connection.pop(context, set())
        for number in numbers:
            self._release(number)


def run_delivery_process(
    settings: Settings, engine_path: str, socket_path: str, authkey: bytes, parent_pid: int,
    log_args: tuple[str, str], metrics_dir: str | None, ready: Connection,
) -> None:  # fmt: skip
    """Entry point of the delivery process (multiprocessing, spawn); `metrics_dir` as
    for the engine process (timerwheel.procs.engine_host)."""
    from timerwheel.observability.log_config import configure_logging

    stop = become_child(parent_pid)
    if metrics_dir is not None:
        metrics.enable(metrics_dir)
    configure_logging(*log_args)
    engine = RemoteEngine(
        settings, CallClient(engine_path, authkey, "engine"), SystemClock(settings.clock_offset_ms)
    )
    try:
        hub = DeliveryHub(engine, settings)
    except Exception as exc:
        ready.send(("failed", f"{type(exc).__name__}: {exc}"))
        engine.close()
        raise SystemExit(1) from exc
    server = CallServer(socket_path, authkey, DeliveryHost(hub).handle, "delivery")
    ready.send(("ready", {}))
    prepare_heap_for_serving()
    set_switch_interval(settings.gil_switch_interval_ms)
    try:
        stopped = wait_for_stop(stop, parent_pid)
    finally:
        hub.close()
        server.close()
        engine.close()
    if not stopped:
        raise SystemExit(1)
