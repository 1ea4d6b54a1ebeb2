"""The engine's API in a process that is not the engine's (a gRPC worker, the delivery
process): `EngineApi` (timerwheel.engine.api), implemented call by call.

`send_batch_async` validates, chooses ids and encodes records in this process (the same
`prepare_sends` the in-process engine runs in its callers' threads) and hands the engine
a ready-to-write `SendOp`, together with the ops of other threads sending at the same
time (`timerwheel.procs.send_funnel`: one call carries them all, each answered alone).
Every other method is one call to the engine process, by a name in
`timerwheel.procs.engine_host.REMOTE_CALLS`, the allow-list that process answers.
`add_fired_listener` becomes a thread that long-polls the engine's `wait_fired`; after the
engine process restarts it reports every topic with fired messages, since the new
engine's fire sequences are unknown here.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any

import structlog

from timerwheel.common import State
from timerwheel.engine.api import EngineApi, FiredListener
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.engine.series import SeriesPause
from timerwheel.observability import metrics
from timerwheel.procs.admission_cell import AdmissionReader
from timerwheel.procs.ipc import CallClient, PeerUnavailable
from timerwheel.procs.send_funnel import SendFunnel
from timerwheel.store import records
from timerwheel.wheels.bulk import BulkResult, RedriveResult, TimerFilter
from timerwheel.wheels.clock import Clock
from timerwheel.wheels.domain import DeliveryOptions, SendSpec, Timer, When
from timerwheel.wheels.lateness import LatenessMinute
from timerwheel.wheels.settings import Settings

if TYPE_CHECKING:
    from timerwheel.engine.trace_ops import DeliveryEvents
    from timerwheel.store.export import ExportSummary

log = structlog.get_logger("timerwheel.remote_engine")

FIRED_POLL_S = 1.0  # how long one wait_fired call may wait for a fire
RECONNECT_WAIT_S = 0.2  # between attempts while the engine process is unreachable


class RemoteEngine(EngineApi):
    def __init__(
        self, settings: Settings, calls: CallClient, clock: Clock,
        admission: AdmissionReader | None = None,
    ) -> None:  # fmt: skip
        """`admission`: the engine process's verdict on sends (procs.admission_cell)."""
        self.settings = settings
        self._calls = calls
        self._clock = clock
        self._ids = MessageIds()
        self._sends = SendFunnel(functools.partial(calls.call, "submit_sends_many"))
        self._admission = admission
        self._closed = threading.Event()
        self._listeners: list[threading.Thread] = []

    # -- TimerApi ---------------------------------------------------------------------------
    def now_ms(self) -> int:
        return self._calls.call("now_ms")

    def admit_send(self) -> None:
        """Refuse a send (AdmissionRefused, as the engine's own) while the engine's firing
        loop runs late, from the word the engine process shares (no call)."""
        refused = self._admission.refused() if self._admission is not None else None
        if refused is not None:
            metrics.recorder().admission_refused()
            raise refused

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        """Prepared here, stored by the engine process; the future is already complete."""
        op = prepare_sends(list(specs), self._clock.now_ms(), self.settings, self._ids)
        future: Future = Future()
        future.set_result(self._sends.submit(op))
        return future

    def cancel(self, message_id: str) -> State:
        return self._calls.call("cancel", message_id)

    def reschedule(self, message_id: str, when: When) -> int:
        return self._calls.call("reschedule", message_id, when)

    def get(self, message_id: str, include_trace: bool = False) -> Timer:
        return self._calls.call("get", message_id, include_trace)

    def pause_series(self, series_id: str, paused: bool) -> SeriesPause:
        return self._calls.call("pause_series", series_id, paused)

    def bulk_cancel(
        self, timer_filter: TimerFilter, limit: int = 0, page_token: str = "",
        purge: bool = False,
    ) -> BulkResult:  # fmt: skip
        return self._calls.call("bulk_cancel", timer_filter, limit, page_token, purge)

    def redrive(
        self, dlq_topic: str, timer_filter: TimerFilter, limit: int = 0, page_token: str = ""
    ) -> RedriveResult:
        return self._calls.call("redrive", dlq_topic, timer_filter, limit, page_token)

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = "",
        include_body: bool = True,
    ) -> tuple[list[Timer], str]:  # fmt: skip
        return self._calls.call(
            "list_pending", topic, from_ms, to_ms, limit, page_token, include_body
        )

    def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> tuple[int, int, int]:
        return self._calls.call("count", topic, from_ms, to_ms)

    def topic_of(self, message_id: str) -> str | None:
        return self._calls.call("topic_of", message_id)

    def stats(self) -> dict[str, Any]:
        return self._calls.call("stats")

    def topics(self) -> list[tuple[str, int, int]]:
        return self._calls.call("topics")

    def fire_lateness(self) -> list[LatenessMinute]:
        return self._calls.call("fire_lateness")

    def export(
        self, out_dir: str, max_rows_per_file: int = 0, reserve_bytes: int = 0
    ) -> ExportSummary:
        return self._calls.call("export", out_dir, max_rows_per_file, reserve_bytes)

    # -- FiredSource ------------------------------------------------------------------------
    def local_now_ms(self) -> int:
        """The service's time as this process reads it: its wall clock, no call (the
        delivery hub's time for a delivery it holds: timerwheel.delivery.first_deliveries)."""
        return self._clock.now_ms()

    def ready_topics(self) -> list[str]:
        return self._calls.call("ready_topics")

    def fetch_deliveries(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[records.FiredRecord]:
        """Read from the engine process, undecoded: the delivery process hands each record
        on to the workers, which decode it into a Delivery."""
        rows = self._calls.call("fetch_fired_raw", topic, after_seq, limit, max_bytes)
        return records.fired_records(rows)

    def delivery_options_of(self, message_ids: list[str]) -> dict[str, DeliveryOptions]:
        return self._calls.call("delivery_options_of", message_ids)

    def ack(
        self, topic: str, message_ids: Iterable[str], first_deliveries: list[bytes] | None = None
    ) -> list[str]:
        return self._calls.call("ack", topic, list(message_ids), first_deliveries)

    def unacked(self) -> int:
        return self._calls.call("unacked")

    def dead_letter(self, topic: str, message_id: str, attempts: int, reason: str) -> bool:
        return self._calls.call("dead_letter", topic, message_id, attempts, reason)

    def record_trace(self, groups: list[DeliveryEvents]) -> bool:
        return self._calls.call("record_trace", groups)

    def delivery_attempts(self, message_ids: list[str]) -> dict[str, int]:
        return self._calls.call("delivery_attempts", message_ids)

    def add_fired_listener(self, listener: FiredListener) -> None:
        thread = threading.Thread(
            target=self._poll_fired, args=(listener,), name="fired-poll", daemon=True
        )
        self._listeners.append(thread)
        thread.start()

    def _poll_fired(self, listener: FiredListener) -> None:
        connected = True
        while not self._closed.is_set():
            try:
                if not connected:  # the engine may have restarted: everything is dirty
                    listener(set(self._calls.call("ready_topics")))
                    connected = True
                topics = self._calls.call("wait_fired", FIRED_POLL_S)
            except PeerUnavailable:
                connected = False
                self._closed.wait(RECONNECT_WAIT_S)
                continue
            if topics:
                listener(topics)

    def close(self) -> None:
        self._closed.set()
        self._calls.close()
        if self._admission is not None:
            self._admission.close()
        for thread in self._listeners:
            thread.join(timeout=FIRED_POLL_S + 1)
