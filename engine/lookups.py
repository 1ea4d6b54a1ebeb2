"""Reads of the stored timers for the engine's API: a timer by id (with the wheel that
holds it, its series and its trace), a topic's pending timers by time, the topic and
attempt limit of an id.

Reads go straight to the store, on the caller's thread, never through the writer. What
the store cannot say alone comes from the scheduler's state: which wheels a SCHEDULED
timer may be in (`Scheduler.wheel_candidates`, then one point read per candidate), and
below which key each wheel holds only tombstones (`wheel_floors`), so a list scan starts
past what was fired or cascaded away.
"""

from __future__ import annotations

from dataclasses import replace

from timerwheel.common import State
from timerwheel.store import extras as extras_cf
from timerwheel.store import keys, records
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import DeliveryOptions, InvalidArgument, NotFound, Timer
from timerwheel.wheels.scheduler import Scheduler, TimerKey
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.topic_policy import by_topic
from timerwheel.wheels.trace import assemble, attempts_made
from timerwheel.wheels.validation import validate_message_ref, validate_topic

MAX_LIST_LIMIT = 1_000
LIST_SCAN_BUDGET = 200_000


class TimerLookups:
    def __init__(self, settings: Settings, store: TimerStore, scheduler: Scheduler) -> None:
        self._settings = settings
        self._store = store
        self._scheduler = scheduler
        self._topic_limits = {topic: limit for topic, (limit, _) in by_topic(settings).items()}

    def max_attempts(self, message_id: str) -> int:
        """Delivery attempts `message_id` may have before it is dead-lettered (0: no limit):
        its send's max_attempts, else its topic's default, else the server's."""
        raw = self._store.get_record(message_id)
        if raw is None:
            return self._settings.max_attempts
        if records.has_extras(raw):
            limit = self._send_options_limit(message_id)
            if limit is not None:
                return limit
        return self._topic_limits.get(records.record_topic(raw), self._settings.max_attempts)

    def delivery_options_of(self, message_ids: list[str]) -> dict[str, DeliveryOptions]:
        """(`max_attempts`, retry policy) of messages whose records the caller already read
        and found to have send options (`records.has_extras`): one `extras` read each, no
        record read. None where the send set none: the delivery side fills in its topic's
        default or the server's (timerwheel.wheels.topic_policy), which the engine cannot
        without reading each record for its topic."""
        options: dict[str, DeliveryOptions] = {}
        for message_id in message_ids:
            extras = extras_cf.get_extras(self._store, None, message_id.encode())
            own = extras_cf.decode_extras(extras) if extras is not None else None
            options[message_id] = (None, None) if own is None else (own.max_attempts, own.retry)
        return options

    def _send_options_limit(self, message_id: str) -> int | None:
        extras = extras_cf.get_extras(self._store, None, message_id.encode())
        return extras_cf.decode_extras(extras).max_attempts if extras is not None else None

    def get(self, message_id: str, include_trace: bool = False) -> Timer:
        """The timer in any state; a SCHEDULED one with the wheel that holds it now and,
        for a series, its schedule and next occurrence; with its trace if asked."""
        validate_message_ref(message_id)
        timer = self._store.get(message_id)
        if timer is None:
            raise NotFound(f"message_id={message_id!r}: no such timer")
        if include_trace:
            timer = self._with_trace(timer)
        if timer.state is State.SCHEDULED:
            candidates = [w.name for w in self._scheduler.wheel_candidates(timer.deliver_at_ms)]
            timer = replace(timer, wheel=self._store.find_wheel(timer, candidates) or candidates[0])
            raw = self._store.get_record(message_id)
            extras = extras_cf.get_extras(self._store, None, message_id.encode())
            if raw is not None and records.is_series(raw) and extras is not None:
                options, number, _, paused = extras_cf.decode_series_state(extras)
                timer = replace(timer, repeat=options.repeat, next_occurrence=number, paused=paused)
        return timer

    def topic_of(self, message_id: str) -> str | None:
        """The stored timer's topic (any state); None for an unknown or malformed id."""
        try:
            validate_message_ref(message_id)
        except InvalidArgument:
            return None
        raw = self._store.get_record(message_id)
        return None if raw is None else records.record_topic(raw)

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = "",
        include_body: bool = True,
    ) -> tuple[list[Timer], str]:  # fmt: skip
        """Scheduled timers of `topic` due in [from_ms, to_ms), by time, one page at a time.

        A page ends early (with a token) once it holds `Settings.max_list_bytes`; without
        `include_body` the bodies are neither returned nor counted."""
        validate_topic(topic, self._settings)
        if from_ms < 0:
            raise InvalidArgument("from_ms", from_ms, "must not be negative")
        if to_ms <= from_ms:
            raise InvalidArgument("to_ms", to_ms, f"must be greater than from_ms ({from_ms})")
        if not 0 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgument("limit", limit, f"must be 0..{MAX_LIST_LIMIT} (0 means 100)")
        after = _decode_page_token(page_token)
        page = self._store.list_pending(
            topic, from_ms, to_ms, limit or 100, after, self._wheel_floors(), LIST_SCAN_BUDGET,
            self._settings.max_list_bytes, include_body,
        )  # fmt: skip
        timers = [self._with_wheel(t) for t in page.timers]
        token = keys.encode_page_token(page.next_after) if page.next_after else ""
        return timers, token

    def wheel_floors(self) -> dict[str, bytes]:
        """`_wheel_floors`, for the engine's other scans (bulk cancel and purge)."""
        return self._wheel_floors()

    def _wheel_floors(self) -> dict[str, bytes]:
        """Below these keys a wheel holds only tombstones (fired or cascaded away), so list
        scans start there instead of wading through them."""
        state = self._scheduler.state
        floors = {"second": keys.encode_timer_key(state.fire_from)}
        for cascade, upper in zip(state.cascades, ("minute", "hour"), strict=True):
            done = cascade.pending_from or TimerKey.start_of(cascade.horizon_ms)
            floors[upper] = keys.encode_timer_key(done)
        return floors

    def _with_trace(self, timer: Timer) -> Timer:
        raw = self._store.get_record(timer.message_id)
        if raw is None:  # removed since it was read
            return timer
        trace = assemble(records.trace_facts(raw), self._store.trace.read(timer.message_id))
        return replace(timer, trace=trace, attempts=attempts_made(trace))

    def _with_wheel(self, timer: Timer) -> Timer:
        candidates = [w.name for w in self._scheduler.wheel_candidates(timer.deliver_at_ms)]
        return replace(timer, wheel=self._store.find_wheel(timer, candidates) or candidates[0])


def _decode_page_token(token: str) -> bytes | None:
    if not token:
        return None
    try:
        return keys.decode_page_token(token)
    except ValueError as exc:
        raise InvalidArgument("page_token", token, "is not a token this server issued") from exc
