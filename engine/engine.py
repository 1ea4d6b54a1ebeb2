"""The in-process engine: the public timer API over the store.

Reads (get, list, fetch fired) go straight to the store; every mutation is an operation
handed to the single writer (`timerwheel.engine.writer`), which applies it in a group commit and
completes its future once durable. The engine validates input in the caller's thread and
encodes records there too, so the writer's per-timer work stays small.

Tests construct the engine with `background=False` and a `VirtualClock`: then no
thread runs and calls drive the same writer iterations inline (`step`, `run_until_idle`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from concurrent.futures import Future

import structlog

from timerwheel.common import SendResult, State, TimerwheelError
from timerwheel.engine.api import EngineApi
from timerwheel.engine.backlog import Backlog
from timerwheel.engine.bulk_calls import BulkCalls
from timerwheel.engine.clock_watch import ClockWatch
from timerwheel.engine.engine_views import EngineViews
from timerwheel.engine.fired_cache import FiredCache
from timerwheel.engine.ids import MessageIds
from timerwheel.engine.lookups import TimerLookups
from timerwheel.engine.move_ops import DeadLetterOp, RescheduleOp
from timerwheel.engine.ops import AckOp, CancelOp
from timerwheel.engine.prepare import prepare_sends
from timerwheel.engine.send_op import SendOp
from timerwheel.engine.series import PauseOp, SeriesPause
from timerwheel.engine.trace_ops import DeliveryEvents, TraceBarrier, TraceOp
from timerwheel.engine.writer import FiredListener, SeriesListener, Writer
from timerwheel.observability import metrics
from timerwheel.store import keys, records
from timerwheel.store.counts import PendingCounts
from timerwheel.store.export_root import ExportSlot
from timerwheel.store.open_store import open_store
from timerwheel.store.rocks import RocksTuning
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.admission import Admission
from timerwheel.wheels.bulk import (
    BulkResult,
    RedriveResult,
    TimerFilter,
)
from timerwheel.wheels.clock import Clock
from timerwheel.wheels.domain import (
    DeliveryOptions,
    FiredTimer,
    InvalidArgument,
    Overloaded,
    SendSpec,
    ShuttingDown,
    Timer,
    When,
)
from timerwheel.wheels.lateness import RecentLateness
from timerwheel.wheels.scheduler import Scheduler
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import (
    resolve_deliver_at_ms,
    validate_ack_count,
    validate_message_ref,
    validate_message_refs,
    validate_topic,
)

log = structlog.get_logger("timerwheel.engine")


class Engine(EngineViews, EngineApi):
    def __init__(self, settings: Settings, clock: Clock, *, background: bool = True) -> None:
        self.settings = settings
        self._clock = clock
        tuning = RocksTuning(
            block_cache_bytes=settings.block_cache_bytes,
            write_buffer_bytes=settings.write_buffer_bytes,
            wheel_write_buffer_bytes=settings.wheel_write_buffer_bytes,
            sync_writes=settings.sync_writes,
        )
        leads = (settings.minute_cascade_lead_ms, settings.hour_cascade_lead_ms)
        self._store, state, created = open_store(  # a non-store or a damaged one: StoreRefused
            settings.data_dir, tuning, lambda: Scheduler.fresh(clock.now_ms(), leads).state
        )
        self._database = self._store.database
        self._scheduler = Scheduler(
            state, leads, settings.fire_tick_ms, settings.cascade_finish_ahead_ms()
        )
        self._lookups = TimerLookups(settings, self._store, self._scheduler)
        self._ids = MessageIds()
        self.export_slot = ExportSlot()
        self._fired_cache = FiredCache(self._scheduler.state.fire_seq, settings.fired_cache_bytes)
        self._counts = PendingCounts(self._database)
        self._clock_watch = ClockWatch(clock, settings.clock_step_threshold_ms)
        self._clock_watch.check_resume(self._scheduler.now_ms)
        self._writer = Writer(  # the writer reads the clock often: it watches for steps
            settings, self._clock_watch, self._store, self._scheduler, self._on_commit_fired,
            self._counts,
        )  # fmt: skip
        ready = {topic: self._store.count_ready(topic) for topic in self._store.ready_topics()}
        self._backlog = Backlog(self._scheduler, ready, settings.max_unacked)
        self._lateness = RecentLateness()
        self._bulk = BulkCalls(settings, self._store, self._lookups, self._writer, self._backlog)
        self._closed = False
        log.info(
            "engine_opened", data_dir=settings.data_dir, recovered=not created,
            now_ms=self._scheduler.now_ms, fire_seq=self._scheduler.state.fire_seq,
            cascades_pending=self._scheduler.busy(),
        )  # fmt: skip
        if background:
            self._writer.start()

    # == the public API =================================================================
    def now_ms(self) -> int:
        return max(self._clock.now_ms(), self._scheduler.now_ms)

    def local_now_ms(self) -> int:
        """The service's time as the caller's process reads it (here: `now_ms`)."""
        return self.now_ms()

    def send(self, spec: SendSpec) -> SendResult:
        return self.send_batch([spec])[0]

    def send_batch(self, specs: Iterable[SendSpec]) -> list[SendResult]:
        """Store sends atomically; returns when they are durable."""
        return self._writer.wait(self.send_batch_async(specs))

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        """Validate, choose ids and encode records here, in the caller's thread; the
        writer's future completes when the batch is durable."""
        return self.submit_sends(
            prepare_sends(list(specs), self.now_ms(), self.settings, self._ids)
        )

    def submit_sends(self, op: SendOp) -> Future:
        """Queue prepared sends (see `prepare_sends`) for the writer, unless the fired,
        un-acked backlog is at its limit."""
        self._backlog.check()
        future = self._writer.submit(op)
        self._backlog.sent(len(op.message_ids))
        return future

    @property
    def admission(self) -> Admission:
        """The send admission gate the writer's tick feeds (timerwheel.wheels.admission)."""
        return self._writer.tick.admission

    def admit_send(self) -> None:
        """Refuse a send (AdmissionRefused) while either rule of the gate refuses: the gRPC
        front asks before it validates anything. Engine.send_batch itself does not ask."""
        refused = self._writer.tick.admission.refused()
        if refused is not None:
            metrics.recorder().admission_refused()
            raise refused

    def set_admission_listener(self, listener: Callable[[bool, int, int], None]) -> None:
        """`listener(refusing, lag_ms, load_pct)` after each writer iteration, on its thread."""
        self._writer.tick.on_admission = listener

    def check_backlog(self) -> None:
        """Refuse sends (Overloaded) while the fired, un-acked backlog is at `max_unacked`."""
        self._backlog.check()

    def unacked(self) -> int:
        """Fired, not yet acked messages, kept without scans (timerwheel.engine.backlog)."""
        return self._backlog.unacked()

    def cancel(self, message_id: str) -> State:
        validate_message_ref(message_id)
        return self._writer.wait(self._writer.submit(CancelOp(message_id=message_id)))

    def reschedule(self, message_id: str, when: When) -> int:
        """Move a SCHEDULED timer to `when`, atomically; returns its new deliver_at_ms."""
        validate_message_ref(message_id)
        deliver_at_ms = resolve_deliver_at_ms(when, self.now_ms(), self.settings)
        op = RescheduleOp(message_id=message_id, when=when, deliver_at_ms=deliver_at_ms)
        return self._writer.wait(self._writer.submit(op))

    def pause_series(self, series_id: str, paused: bool) -> SeriesPause:
        """Pause (`paused`) or resume a SCHEDULED series, atomically (PauseOp)."""
        validate_message_ref(series_id, "series_id")
        op = PauseOp(series_id=series_id, paused=paused)
        return self._writer.wait(self._writer.submit(op))

    def ack(
        self, topic: str, message_ids: Iterable[str], first_deliveries: list[bytes] | None = None
    ) -> list[str]:
        """Retire fired messages; returns the ids that were FIRED on `topic` and are now ACKED.
        `first_deliveries` (from the delivery hub, beside each id): the first delivery it
        held for this Ack, written into the acked record (timerwheel.delivery.first_deliveries)."""
        validate_topic(topic, self.settings)
        ids = list(message_ids)
        validate_ack_count(len(ids), self.settings)
        validate_message_refs(ids)
        if first_deliveries is not None and len(first_deliveries) != len(ids):
            raise ValueError(f"{len(ids)} message ids but {len(first_deliveries)} deliveries")
        if not ids:
            return []
        op = AckOp(topic=topic, message_ids=ids, first_deliveries=first_deliveries)
        acked = self._writer.wait(self._writer.submit(op))
        self._backlog.taken(topic, len(acked))
        return acked

    def dead_letter(self, topic: str, message_id: str, attempts: int, reason: str) -> bool:
        """Move a FIRED message of `topic` to its dead-letter topic (see DeadLetterOp);
        False when it was acked meanwhile. Its old `ready` entry goes while the DLQ one
        takes a new fire sequence, so for the backlog count it is one ack."""
        op = DeadLetterOp(topic=topic, message_id=message_id, attempts=attempts, reason=reason)
        moved = self._writer.wait(self._writer.submit(op))
        self._backlog.taken(topic, 1 if moved else 0)
        return moved

    def bulk_cancel(
        self, timer_filter: TimerFilter, limit: int = 0, page_token: str = "",
        purge: bool = False,
    ) -> BulkResult:  # fmt: skip
        """Cancel (or with `purge`, also retire the FIRED ones of) what `timer_filter`
        selects, one page a call (timerwheel.engine.bulk_calls)."""
        return self._bulk.cancel(timer_filter, limit, page_token, purge)

    def redrive(
        self, dlq_topic: str, timer_filter: TimerFilter, limit: int = 0, page_token: str = ""
    ) -> RedriveResult:
        """Move dead letters of `dlq_topic` back to their topics, one page a call."""
        return self._bulk.redrive(dlq_topic, timer_filter, limit, page_token)

    def max_attempts(self, message_id: str) -> int:
        """Delivery attempts `message_id` may have before it is dead-lettered (0: no limit)."""
        return self._lookups.max_attempts(message_id)

    def delivery_options_of(self, message_ids: list[str]) -> dict[str, DeliveryOptions]:
        """(max_attempts, retry policy) of fetched messages whose records have send options."""
        return self._lookups.delivery_options_of(message_ids)

    def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> tuple[int, int, int]:
        """Pending (SCHEDULED) timers of `topic`: (count, from_ms, to_ms) of what was
        counted. No range (both 0): the exact total. Else the whole minutes [from_ms,
        to_ms) touches (to_ms 0: no upper bound), from per-minute counters
        (timerwheel.store.counts)."""
        validate_topic(topic, self.settings)
        if from_ms < 0:
            raise InvalidArgument("from_ms", from_ms, "must not be negative")
        if to_ms < 0 or (to_ms and to_ms <= from_ms):
            raise InvalidArgument(
                "to_ms", to_ms, f"must be greater than from_ms ({from_ms}), or 0: no bound"
            )
        if not from_ms and not to_ms:
            return self._counts.total(topic), 0, 0
        return self._counts.in_range(topic, from_ms, to_ms or keys.NO_TIME_BOUND_MS)

    def get(self, message_id: str, include_trace: bool = False) -> Timer:
        """The stored timer in any state (timerwheel.engine.lookups); NotFound for an unknown id.
        With its trace, after the delivery events recorded so far are committed (they
        linger for the writer's next commit: timerwheel.engine.writer)."""
        if include_trace:
            self._commit_lingering()
        return self._lookups.get(message_id, include_trace)

    def _commit_lingering(self) -> None:
        # Refused or failed (overloaded, stopping, a full disk): the read shows what is
        # committed; it does not fail for the trace's sake.
        with contextlib.suppress(TimerwheelError):
            self._writer.wait(self._writer.submit(TraceBarrier()))

    def record_trace(self, groups: list[DeliveryEvents]) -> bool:
        """Store delivery events, in groups (timerwheel.engine.trace_ops), without waiting for their
        commit; False when the writer cannot take them now (overloaded, stopping): they
        are dropped, and the trace misses those attempts."""
        op = TraceOp(groups=groups)
        if not op.weight:
            return True
        try:
            self._writer.submit(op)
        except (Overloaded, ShuttingDown) as exc:
            log.warning("trace_events_dropped", count=op.weight, error=str(exc))
            return False
        return True

    def delivery_attempts(self, message_ids: list[str]) -> dict[str, int]:
        """The highest delivery attempt recorded per id (ids never delivered left out)."""
        return self._store.trace.attempts(message_ids)

    def topic_of(self, message_id: str) -> str | None:
        """The stored timer's topic (any state); None for an unknown or malformed id."""
        return self._lookups.topic_of(message_id)

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = "",
        include_body: bool = True,
    ) -> tuple[list[Timer], str]:  # fmt: skip
        """Scheduled timers of `topic` due in [from_ms, to_ms), by time, one page at a time
        (timerwheel.engine.lookups)."""
        return self._lookups.list_pending(topic, from_ms, to_ms, limit, page_token, include_body)

    def fetch_fired(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[FiredTimer]:
        """Fired, un-acked messages of `topic` after fire sequence `after_seq`, in fire order:
        from memory while cached (a consumer that keeps up), else the `ready` family."""
        return records.decode_fired(self.fetch_fired_raw(topic, after_seq, limit, max_bytes))

    def fetch_deliveries(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[records.FiredRecord]:
        """`fetch_fired` for the dispatchers: the records undecoded (`records.FiredRecord`;
        a Delivery is decoded from one where it is built)."""
        rows = self.fetch_fired_raw(topic, after_seq, limit, max_bytes)
        return records.fired_records(rows)

    def fetch_fired_raw(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[tuple[int, bytes, bytes]]:
        """`fetch_fired` undecoded, (fire seq, message id, record): what another process
        reads, so decoding happens there and not on this process's GIL."""
        cached = self._fired_cache.read_raw(topic, after_seq, limit, max_bytes)
        if cached is not None:
            return cached
        return self._store.read_ready_raw(topic, after_seq, limit, max_bytes)

    def ready_topics(self) -> list[str]:
        return self._store.ready_topics()

    def add_fired_listener(self, listener: FiredListener) -> None:
        """`listener(topics)` is called on the writer thread after each commit that fired."""
        self._writer.add_listener(listener)

    def add_series_listener(self, listener: SeriesListener) -> None:
        """`listener(changes)`: on the writer thread after a commit that changed a series."""
        self._writer.add_series_listener(listener)

    @property
    def store(self) -> TimerStore:
        return self._store

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    def step(self) -> bool:
        """Manual mode: run one writer iteration; True when more work is waiting."""
        self._require_manual("step")
        return self._writer.iterate()

    def run_until_idle(self) -> None:
        """Manual mode: run writer iterations until nothing is due, queued or cascading."""
        self._require_manual("run_until_idle")
        while self._writer.iterate():
            pass

    def _require_manual(self, name: str) -> None:
        if self._writer.background:
            raise RuntimeError(f"{name} is for engines made with background=False")

    def close(self) -> None:
        """Stop accepting, finish queued writes, close RocksDB cleanly. Idempotent."""
        if self._closed:
            return
        self._writer.stop()
        self._closed = True
        self._store.close()
        log.info("engine_closed", data_dir=self.settings.data_dir, now_ms=self._scheduler.now_ms)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # == helpers ========================================================================
    def _on_commit_fired(
        self, entries: dict[str, list[tuple[int, bytes, bytes]]], retired: dict[str, list[int]]
    ) -> None:
        self._fired_cache.add(entries, retired)
        if entries:
            self._backlog.by_topic.fired(entries)
            self._observe_lateness(entries)

    def _observe_lateness(self, entries: dict[str, list[tuple[int, bytes, bytes]]]) -> None:
        """One commit's fires into the recent lateness (they share one fired_at)."""
        raws = [raw for rows in entries.values() for _, _, raw in rows]
        if raws:
            fired_at_ms = records.record_fired_at_ms(raws[0])
            self._lateness.observe(fired_at_ms, records.fire_lateness_ms(raws))
