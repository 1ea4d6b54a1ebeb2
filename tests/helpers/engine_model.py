"""The plain model tests/engine/test_engine_model.py's state machine checks the engine
against, and the checks of what the engine did (the properties that module states):
what each timer's state and deliver time should be, a sorted list for the model wheel,
and each series' next occurrence by its missed policy. After each rule the machine reads
every newly fired message and checks it: fired once, never early, never cancelled, the
replaced body, a dead letter once on its DLQ, a series' occurrences in order; after a
drain nothing due is left, each series and each finished record (until its retention
ends) reads as the model says.

ModelChecks is a mixin of the machine: it holds the model's state and reads the
machine's `engine`, which the machine opens (and reopens)."""

from __future__ import annotations

import bisect

import pytest

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.wheels.domain import MissedPolicy, NotFound, Repeat
from timerwheel.wheels.settings import HOUR_MS

TOPICS = ("orders", "reminders")
DLQ_TOPICS = tuple(f"{topic}.dlq" for topic in TOPICS)
RETENTION_MS = 2 * HOUR_MS
SWEEP_SLACK_MS = 1_000  # the sweep runs at most once a second


class Series:
    """The model of one recurring series: what it may fire and what it fired."""

    def __init__(self, topic: str, repeat: Repeat, first_ms: int) -> None:
        self.topic, self.repeat, self.first_ms = topic, repeat, first_ms
        self.fired: list[tuple[int, int]] = []  # (deliver_at_ms, fired_at_ms) by number
        self.cancelled = False

    def expected_next_ms(self) -> int:
        """When occurrence len(fired)+1 is due, from the previous one and its fire time."""
        if not self.fired:
            return self.first_ms
        (at_ms, fired_at_ms), every = self.fired[-1], self.repeat.every_ms
        if at_ms + every > fired_at_ms or self.repeat.missed is MissedPolicy.FIRE_EACH:
            return at_ms + every
        return at_ms + every * ((fired_at_ms - at_ms) // every + 1)

    def done(self) -> bool:
        return self.cancelled or len(self.fired) >= self.repeat.max_count


class ModelChecks:
    """The model's state, and the checks of the engine against it (a mixin of the machine)."""

    engine: Engine  # the machine's: opened, closed and reopened by its rules

    def __init__(self) -> None:
        super().__init__()
        self.deliver_at: dict[str, int] = {}
        self.state: dict[str, State] = {}
        self.finished_at: dict[str, int] = {}  # ACKED / CANCELLED time
        self.topic: dict[str, str] = {}
        self.body: dict[str, bytes] = {}  # bodies given by replacing sends
        self.pending: list[tuple[int, str]] = []  # sorted (deliver_at_ms, id): the model wheel
        self.fired_seen: set[str] = set()
        self.last_seq = dict.fromkeys(TOPICS + DLQ_TOPICS, 0)
        self.dead_lettered: dict[str, tuple[str, int]] = {}  # id -> (its topic, attempts)
        self.dlq_seen: set[str] = set()
        self.series: dict[str, Series] = {}
        self.client_ids = 0

    def _record_send(self, message_id: str, topic: str, deliver_at_ms: int) -> None:
        self.deliver_at[message_id] = deliver_at_ms
        self.topic[message_id] = topic
        self.state[message_id] = State.SCHEDULED
        bisect.insort(self.pending, (deliver_at_ms, message_id))

    def _collect_fired(self) -> None:
        """Read every newly fired message and check it against the model."""
        now_ms = self.engine.now_ms()
        for topic in DLQ_TOPICS:
            for fired in self.engine.fetch_fired(topic, self.last_seq[topic], 10_000):
                self.last_seq[topic] = max(self.last_seq[topic], fired.seq)
                self._check_dead_letter(fired.timer)
        for topic in TOPICS:
            for fired in self.engine.fetch_fired(topic, self.last_seq[topic], 10_000):
                timer = fired.timer
                self.last_seq[topic] = max(self.last_seq[topic], fired.seq)
                if "#" in timer.message_id:
                    self._check_occurrence(timer, now_ms)
                    continue
                assert timer.message_id not in self.fired_seen, f"{timer.message_id} fired twice"
                assert self.state[timer.message_id] is State.SCHEDULED, (
                    f"{timer.message_id} fired in model state {self.state[timer.message_id]}"
                )
                assert timer.deliver_at_ms == self.deliver_at[timer.message_id]
                if timer.message_id in self.body:
                    assert timer.body == self.body[timer.message_id], "not the replaced body"
                assert timer.deliver_at_ms <= timer.fired_at_ms <= now_ms, "fired early"
                self.fired_seen.add(timer.message_id)
                self.state[timer.message_id] = State.FIRED
                self.pending.remove((timer.deliver_at_ms, timer.message_id))

    def _check_occurrence(self, timer, now_ms: int) -> None:
        """Occurrences of a series fire in order, each once, at their schedule's time
        (never early), none after a cancel or past max_count."""
        series_id, number = timer.message_id.split("#")
        series = self.series[series_id]
        assert not series.done(), f"{timer.message_id} after the series ended"
        assert int(number) == len(series.fired) + 1, f"{timer.message_id} out of order or twice"
        assert timer.deliver_at_ms == series.expected_next_ms(), timer
        assert timer.deliver_at_ms <= timer.fired_at_ms <= now_ms, "occurrence fired early"
        assert timer.topic == series.topic
        series.fired.append((timer.deliver_at_ms, timer.fired_at_ms))

    def _check_series(self, now_ms: int) -> None:
        """After a drain, no series is overdue; each reports the state the model expects."""
        for series_id, series in self.series.items():
            try:
                timer = self.engine.get(series_id)
            except NotFound:  # retention removed a finished or cancelled series
                assert series.done()
                continue
            if series.cancelled:
                assert timer.state is State.CANCELLED
            elif series.done():
                assert timer.state is State.ACKED
            else:
                assert timer.state is State.SCHEDULED
                assert timer.deliver_at_ms == series.expected_next_ms() > now_ms, series_id
                assert timer.next_occurrence == len(series.fired) + 1

    def _check_dead_letter(self, timer) -> None:
        """A dead letter appears once on the DLQ, after it fired on its own topic."""
        message_id = timer.message_id
        assert message_id in self.dead_lettered, f"{message_id} on a DLQ, never dead-lettered"
        assert message_id not in self.dlq_seen, f"{message_id} twice on the DLQ"
        assert message_id in self.fired_seen
        origin, attempts = self.dead_lettered[message_id]
        assert timer.properties["timerwheel.dead_letter.topic"] == origin
        assert timer.properties["timerwheel.dead_letter.attempts"] == str(attempts)
        assert timer.deliver_at_ms == self.deliver_at[message_id]
        self.dlq_seen.add(message_id)

    def _drain_and_check(self) -> None:
        self.engine.run_until_idle()
        self._collect_fired()
        now_ms = self.engine.now_ms()
        overdue = [mid for t, mid in self.pending if t <= now_ms]
        assert not overdue, f"due by {now_ms} but not fired after a drain: {overdue[:5]}"
        self._check_series(now_ms)
        self._check_retention(now_ms)

    def _check_retention(self, now_ms: int) -> None:
        for message_id, finished_at in list(self.finished_at.items()):
            expire_at = finished_at + RETENTION_MS
            if now_ms < expire_at:
                assert self.engine.get(message_id).state is self.state[message_id]
            elif now_ms >= expire_at + SWEEP_SLACK_MS:
                with pytest.raises(NotFound):
                    self.engine.get(message_id)
                del self.finished_at[message_id]
                del self.state[message_id]
