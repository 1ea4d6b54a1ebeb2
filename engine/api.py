"""The engine's API as its callers see it, whichever process the engine runs in.

Two callers, two protocols:

    gRPC front (server/)        ──TimerApi────>  ┌ Engine        (same process)
    delivery hub (delivery/)    ──FiredSource──> └ RemoteEngine  (another process: procs/)

`Engine` and `RemoteEngine` each implement `EngineApi` (both protocols) explicitly, method
by method; the type checker holds them to it. Nothing is forwarded by name: the engine
process answers exactly the calls in `procs.engine_host.REMOTE_CALLS`, and a method added
here must be added to both implementations (and to that table, if it crosses).

Everything here is blocking: a mutation returns when its group commit is durable.
"""

from __future__ import annotations

from collections.abc import Iterable
from concurrent.futures import Future
from typing import TYPE_CHECKING, Any, Protocol

from timerwheel.common import State
from timerwheel.engine.series import SeriesPause
from timerwheel.engine.trace_ops import DeliveryEvents
from timerwheel.engine.writer import FiredListener
from timerwheel.store.fired_record import FiredRecord
from timerwheel.wheels.bulk import BulkResult, RedriveResult, TimerFilter
from timerwheel.wheels.domain import DeliveryOptions, SendSpec, Timer, When
from timerwheel.wheels.lateness import LatenessMinute
from timerwheel.wheels.settings import Settings

if TYPE_CHECKING:  # the export's code loads only when an export runs
    from timerwheel.store.export import ExportSummary


class TimerApi(Protocol):
    """What the gRPC front (TimerService, TimerAdmin, the request guard) asks of the engine."""

    settings: Settings

    def now_ms(self) -> int:
        """The service's time: the engine's clock, never behind what it has fired."""
        ...

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        """Validate and store sends atomically; the future's result is their SendResults,
        once durable (it may already be complete)."""
        ...

    def cancel(self, message_id: str) -> State: ...

    def reschedule(self, message_id: str, when: When) -> int:
        """Move a SCHEDULED timer; returns its new deliver_at_ms."""
        ...

    def get(self, message_id: str, include_trace: bool = False) -> Timer: ...

    def pause_series(self, series_id: str, paused: bool) -> SeriesPause:
        """Pause (`paused`) or resume a SCHEDULED recurring series (timerwheel.engine.series)."""
        ...

    def bulk_cancel(
        self, timer_filter: TimerFilter, limit: int = 0, page_token: str = "",
        purge: bool = False,
    ) -> BulkResult:  # fmt: skip
        """Cancel (or `purge`) what the filter selects, a bounded page a call
        (timerwheel.wheels.bulk)."""
        ...

    def redrive(
        self, dlq_topic: str, timer_filter: TimerFilter, limit: int = 0, page_token: str = ""
    ) -> RedriveResult:
        """Move dead letters of `dlq_topic` back to the topics they came from."""
        ...

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = "",
        include_body: bool = True,
    ) -> tuple[list[Timer], str]:  # fmt: skip
        ...

    def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> tuple[int, int, int]: ...

    def topic_of(self, message_id: str) -> str | None: ...

    def stats(self) -> dict[str, Any]: ...

    def topics(self) -> list[tuple[str, int, int]]: ...

    def fire_lateness(self) -> list[LatenessMinute]: ...

    def export(
        self, out_dir: str, max_rows_per_file: int = 0, reserve_bytes: int = 0
    ) -> ExportSummary:
        """A consistent cut of the live store as SST files, one export at a time."""
        ...


class FiredSource(Protocol):
    """What the delivery hub asks of the engine: fired messages, and what settles them."""

    settings: Settings

    def now_ms(self) -> int: ...

    def local_now_ms(self) -> int:
        """The service's time as the caller's process reads it, without a call."""
        ...

    def add_fired_listener(self, listener: FiredListener) -> None:
        """`listener(topics)` after each commit that fired messages of those topics."""
        ...

    def ready_topics(self) -> list[str]:
        """Every topic with fired, un-acked messages."""
        ...

    def fetch_deliveries(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[FiredRecord]:
        """Fired, un-acked messages of `topic` after fire sequence `after_seq`, in order."""
        ...

    def delivery_options_of(self, message_ids: list[str]) -> dict[str, DeliveryOptions]:
        """The delivery attempts each message may have (0: no limit) and its own retry
        policy, each None where its send set none (its topic's or the server's, which the
        delivery side fills in), for ids whose record says it has send options; asked
        once when they are fetched, so a failed attempt later needs no call."""
        ...

    def ack(
        self, topic: str, message_ids: Iterable[str], first_deliveries: list[bytes] | None = None
    ) -> list[str]:
        """Retire fired messages; the ids that were FIRED on `topic` and are now ACKED."""
        ...

    def unacked(self) -> int: ...

    def dead_letter(self, topic: str, message_id: str, attempts: int, reason: str) -> bool: ...

    def record_trace(self, groups: list[DeliveryEvents]) -> bool: ...

    def delivery_attempts(self, message_ids: list[str]) -> dict[str, int]:
        """The highest delivery attempt recorded per id (ids never delivered left out)."""
        ...


class EngineApi(TimerApi, FiredSource, Protocol):
    """Both: what `Engine` and `RemoteEngine` implement."""

    def close(self) -> None: ...
