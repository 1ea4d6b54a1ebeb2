"""Model-based test of the engine: random sends, cancels, gets, acks, clock steps and
reopens, in virtual time against real RocksDB, checked against a plain sorted-list model.

Properties checked after every clock step:
- every timer fires exactly once, never before its time, and no later than the step
  that reached its time (one `run_until_idle` drain);
- cancelled timers never fire; `get` reports the state the model expects;
- a rescheduled timer fires once, at its new time (never its old one); a replaced one
  (IfExists.REPLACE) delivers its new body once, a cancelled one replaced too (then kept
  for its own retention once finished again); KEEP changes nothing;
- a dead-lettered message appears exactly once on its topic's DLQ;
- the pending counters (Count) match the model: totals exactly, ranges by whole minutes;
- a recurring series fires each occurrence once, in order, at its schedule's time (by
  its missed policy), never early, never after a cancel or past max_count;
- ACKED/CANCELLED records stay queryable for the retention period, then disappear.
Chunk sizes are tiny so cascades and drains are cut into many batches (and reopens
land in the middle of them). The model's state, and the checks each rule and drain make
of what the engine fired and holds, are its mixin helpers.engine_model.ModelChecks; the
rules and the invariants are here.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import pytest
from helpers.engine_model import RETENTION_MS, TOPICS, ModelChecks, Series
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    precondition,
    rule,
)

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import (
    FailedPrecondition,
    IfExists,
    MissedPolicy,
    NotFound,
    Repeat,
    SendOptions,
    SendSpec,
    When,
    WhenKind,
)
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings

pytestmark = pytest.mark.system  # a long randomized search (a hypothesis state machine)

delays = st.one_of(
    st.integers(0, 1_500),
    st.integers(0, 2 * MINUTE_MS),
    st.integers(0, 3 * HOUR_MS),
    st.integers(0, 3 * 7 * DAY_MS),
)


class EngineModel(ModelChecks, RuleBasedStateMachine):
    timers = Bundle("timers")
    series_ids = Bundle("series")

    def __init__(self) -> None:
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="timerwheel-model-")
        # Start just before an hour boundary so early steps cross minute and hour edges.
        self.clock = VirtualClock(1_700_002_800_000 - 15_000)
        self.settings = Settings(
            data_dir=self.dir, sync_writes=False, retention_ms=RETENTION_MS,
            cascade_chunk=3, fire_chunk=4, sweep_chunk=2, max_group_ops=5,
        )  # fmt: skip
        self.engine = Engine(self.settings, self.clock, background=False)

    def teardown(self) -> None:
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- rules -------------------------------------------------------------------------
    @rule(target=timers, topic=st.sampled_from(TOPICS), delay_ms=delays)
    def send_delay(self, topic: str, delay_ms: int) -> str:
        result = self.engine.send(SendSpec(topic, b"d", When(WhenKind.DELAY, delay_ms)))
        assert result.deliver_at_ms == self.engine.now_ms() + delay_ms
        self._record_send(result.message_id, topic, result.deliver_at_ms)
        self._collect_fired()
        return result.message_id

    @rule(
        target=timers,
        topic=st.sampled_from(TOPICS),
        level=st.sampled_from([MINUTE_MS, HOUR_MS]),
        slots_ahead=st.integers(0, 30),
        offsets=st.lists(st.integers(0, 3), min_size=1, max_size=12),
    )
    def send_many_in_one_slot(self, topic, level, slots_ahead, offsets) -> str:
        """Several timers on (or next to) one slot boundary, in one atomic batch."""
        now_ms = self.engine.now_ms()
        boundary = now_ms - now_ms % level + (slots_ahead + 1) * level
        specs = [
            SendSpec(topic, b"s", When(WhenKind.DELIVER_AT, boundary - 1 + o)) for o in offsets
        ]
        results = self.engine.send_batch(specs)
        for result in results:
            self._record_send(result.message_id, topic, result.deliver_at_ms)
        self._collect_fired()
        return results[0].message_id

    @rule(target=timers, topic=st.sampled_from(TOPICS), past_ms=st.integers(0, HOUR_MS))
    def send_in_the_past(self, topic: str, past_ms: int) -> str:
        deliver_at_ms = self.engine.now_ms() - past_ms
        result = self.engine.send(SendSpec(topic, b"p", When(WhenKind.DELIVER_AT, deliver_at_ms)))
        self._record_send(result.message_id, topic, deliver_at_ms)
        self._collect_fired()
        assert self.state[result.message_id] is State.FIRED, "a past time fires at once"
        return result.message_id

    @rule(target=timers, topic=st.sampled_from(TOPICS), delay_ms=delays, resend=st.booleans())
    def send_with_client_id(self, topic: str, delay_ms: int, resend: bool) -> str:
        self.client_ids += 1
        spec = SendSpec(
            topic, b"c", When(WhenKind.DELAY, delay_ms), message_id=f"c-{self.client_ids}"
        )
        first = self.engine.send(spec)
        self._record_send(first.message_id, topic, first.deliver_at_ms)
        self._collect_fired()
        if resend:
            again = self.engine.send(spec)
            assert again[:2] == first[:2], "an idempotent resend answers as the first send"
            assert again.existed and again.existing_state is self.state[first.message_id]
            self._collect_fired()
        return first.message_id

    @rule(message_id=timers, delay_ms=delays)
    def reschedule(self, message_id: str, delay_ms: int) -> None:
        """A SCHEDULED timer moves and must fire once at the new time, never the old."""
        expected = self.state.get(message_id)
        when = When(WhenKind.DELAY, delay_ms)
        if expected is None:
            with pytest.raises(NotFound):
                self.engine.reschedule(message_id, when)
        elif expected is not State.SCHEDULED:
            with pytest.raises(FailedPrecondition, match=expected.name):
                self.engine.reschedule(message_id, when)
        else:
            new_at = self.engine.reschedule(message_id, when)
            assert new_at == self.engine.now_ms() + delay_ms
            self.pending.remove((self.deliver_at[message_id], message_id))
            self._record_send(message_id, self.topic[message_id], new_at)
        self._collect_fired()

    @rule(
        message_id=timers,
        delay_ms=delays,
        if_exists=st.sampled_from([IfExists.REPLACE, IfExists.KEEP]),
    )
    def send_again(self, message_id: str, delay_ms: int, if_exists: IfExists) -> None:
        """A send under a taken id: REPLACE (debounce) or KEEP."""
        self.client_ids += 1
        body = f"r{self.client_ids}".encode()
        topic = self.topic[message_id]
        spec = SendSpec(topic, body, When(WhenKind.DELAY, delay_ms), {}, message_id, if_exists)
        expected = self.state.get(message_id)
        if expected is None:  # gone after its retention: a new timer under the old id
            result = self.engine.send(spec)
            self.body[message_id] = body
            self._record_send(message_id, topic, result.deliver_at_ms)
        elif if_exists is IfExists.KEEP:
            kept = self.engine.send(spec)
            assert kept[:2] == (message_id, self.deliver_at[message_id])
            assert kept.existed and kept.existing_state is expected
        elif expected not in (State.SCHEDULED, State.CANCELLED):
            with pytest.raises(FailedPrecondition, match=expected.name):
                self.engine.send(spec)
        else:  # REPLACE: a pending timer debounced, or a cancelled id used again
            result = self.engine.send(spec)
            assert result.deliver_at_ms == self.engine.now_ms() + delay_ms
            if expected is State.SCHEDULED:
                self.pending.remove((self.deliver_at[message_id], message_id))
            else:
                del self.finished_at[message_id]  # live again: its old retention is void
            self.body[message_id] = body
            self._record_send(message_id, topic, result.deliver_at_ms)
        self._collect_fired()

    @rule(message_id=timers, attempts=st.integers(1, 5))
    def dead_letter(self, message_id: str, attempts: int) -> None:
        """What delivery does when a message runs out of attempts (nacks, ack timeouts):
        a FIRED message moves to its topic's DLQ, once; anything else is left alone."""
        origin = self.topic[message_id].removesuffix(".dlq")
        moved = self.engine.dead_letter(origin, message_id, attempts, "model")
        in_origin = self.state.get(message_id) is State.FIRED and self.topic[message_id] == origin
        assert moved == in_origin
        if moved:
            self.topic[message_id] = origin + ".dlq"
            self.dead_lettered[message_id] = (origin, attempts)
        self._collect_fired()
        assert not moved or message_id in self.dlq_seen, "a dead letter is on its DLQ at once"

    @rule(
        target=series_ids,
        topic=st.sampled_from(TOPICS),
        start_ms=st.one_of(st.integers(0, 1_500), st.integers(0, 3 * HOUR_MS)),
        every_ms=st.one_of(
            st.integers(1_000, 90_000), st.integers(1, 48).map(lambda h: h * HOUR_MS // 4)
        ),
        max_count=st.integers(1, 6),
        missed=st.sampled_from(MissedPolicy),
    )
    def send_series(self, topic, start_ms, every_ms, max_count, missed) -> str:
        series_id = f"series-{len(self.series) + 1}"
        repeat = Repeat(every_ms=every_ms, max_count=max_count, missed=missed)
        spec = SendSpec(
            topic, b"tick", When(WhenKind.DELAY, start_ms), {}, series_id,
            options=SendOptions(repeat=repeat),
        )  # fmt: skip
        result = self.engine.send(spec)
        assert result.deliver_at_ms == self.engine.now_ms() + start_ms
        self.series[series_id] = Series(topic, repeat, result.deliver_at_ms)
        self._collect_fired()
        return series_id

    @rule(series_id=series_ids)
    def cancel_series(self, series_id: str) -> None:
        series = self.series[series_id]
        if series.done() and not series.cancelled:
            with pytest.raises((FailedPrecondition, NotFound)):
                self.engine.cancel(series_id)
        else:
            try:
                assert self.engine.cancel(series_id) is State.CANCELLED
            except NotFound:
                assert series.cancelled  # its retention ended
            series.cancelled = True
        self._collect_fired()

    @rule(message_id=timers)
    def cancel(self, message_id: str) -> None:
        expected = self.state.get(message_id)
        if expected is None:  # retention removed it
            with pytest.raises(NotFound):
                self.engine.cancel(message_id)
        elif expected in (State.FIRED, State.ACKED):
            with pytest.raises(FailedPrecondition):
                self.engine.cancel(message_id)
        else:
            assert self.engine.cancel(message_id) is State.CANCELLED
            if expected is State.SCHEDULED:
                self.state[message_id] = State.CANCELLED
                self.finished_at[message_id] = self.engine.now_ms()
                self.pending.remove((self.deliver_at[message_id], message_id))
        self._collect_fired()

    @rule(
        topic=st.sampled_from(TOPICS), from_ms=st.integers(0, 2 * DAY_MS),
        span_ms=st.integers(1, 2 * DAY_MS), limit=st.integers(1, 4),
    )  # fmt: skip
    def bulk_cancel(self, topic: str, from_ms: int, span_ms: int, limit: int) -> None:
        """Cancel a topic's timers due in a range, page by page: exactly the model's."""
        self._drain_and_check()  # no time passes: what is due was fired
        lo = self.engine.now_ms() + from_ms
        hi = lo + span_ms
        timers = [mid for t, mid in self.pending if self.topic[mid] == topic and lo <= t < hi]
        series = [
            sid for sid, s in self.series.items()
            if s.topic == topic and not s.done() and lo <= s.expected_next_ms() < hi
        ]  # fmt: skip
        cancelled, token = 0, ""
        while True:
            page = self.engine.bulk_cancel(
                TimerFilter(topic=topic, from_ms=lo, to_ms=hi), limit=limit, page_token=token
            )
            assert page.cancelled <= limit and page.purged == 0
            cancelled += page.cancelled
            token = page.next_token
            if not token:
                break
        assert cancelled == len(timers) + len(series)
        now_ms = self.engine.now_ms()
        for message_id in timers:
            self.state[message_id] = State.CANCELLED
            self.finished_at[message_id] = now_ms
            self.pending.remove((self.deliver_at[message_id], message_id))
        for series_id in series:
            self.series[series_id].cancelled = True
        self._collect_fired()

    @rule(message_id=consumes(timers))
    def ack(self, message_id: str) -> None:
        acked = self.engine.ack(self.topic[message_id], [message_id])
        if self.state.get(message_id) is State.FIRED:
            assert acked == [message_id]
            self.state[message_id] = State.ACKED
            self.finished_at[message_id] = self.engine.now_ms()
        else:
            assert acked == []
        self._collect_fired()

    @rule(message_id=timers)
    def get(self, message_id: str) -> None:
        expected = self.state.get(message_id)
        if expected is None:
            with pytest.raises(NotFound):
                self.engine.get(message_id)
            return
        timer = self.engine.get(message_id)
        assert timer.state is expected
        assert timer.deliver_at_ms == self.deliver_at[message_id]
        if expected is State.SCHEDULED:
            assert timer.wheel in ("second", "minute", "hour")
            assert self.engine.store.find_wheel(timer, [timer.wheel]) == timer.wheel
        else:
            assert timer.wheel == ""

    @rule(
        step_ms=st.one_of(
            st.integers(1, 999), st.integers(1_000, 70_000), st.integers(0, 3 * DAY_MS)
        )
    )
    def step(self, step_ms: int) -> None:
        self.clock.advance(step_ms)
        self._drain_and_check()

    @rule(
        level=st.sampled_from([MINUTE_MS, HOUR_MS, DAY_MS]),
        offset_ms=st.sampled_from([-300_001, -300_000, -10_001, -10_000, -9_999, -1, 0, 1]),
    )
    def step_to_boundary(self, level: int, offset_ms: int) -> None:
        """Land exactly on (or around a cascade lead before) a slot boundary."""
        now_ms = self.clock.now_ms()
        target = now_ms - now_ms % level + level + offset_ms
        if target > now_ms:
            self.clock.advance(target - now_ms)
        self._drain_and_check()

    @rule(down_ms=st.integers(0, 2 * HOUR_MS))
    def reopen(self, down_ms: int) -> None:
        """Close, let time pass while down, reopen: overdue timers fire, cascades resume."""
        self.engine.close()
        self.clock.advance(down_ms)
        self.engine = Engine(self.settings, self.clock, background=False)
        self._drain_and_check()

    @precondition(lambda self: self.pending)
    @rule()
    def step_to_next_due(self) -> None:
        next_due = self.pending[0][0]
        if next_due > self.clock.now_ms():
            self.clock.advance(next_due - self.clock.now_ms())
        self._drain_and_check()

    # -- checks ------------------------------------------------------------------------
    @invariant()
    def counts_match_the_pending_timers(self) -> None:
        """Per-topic totals are exact; a range counts the whole minutes it touches."""
        for topic in TOPICS:
            due = [t for t, mid in self.pending if self.topic[mid] == topic]
            due += [  # a running series counts as one pending timer, at its next time
                s.expected_next_ms() for s in self.series.values()
                if s.topic == topic and not s.done()
            ]  # fmt: skip
            due.sort()
            assert self.engine.count(topic) == (len(due), 0, 0)
            if due:
                lo, hi = due[0] - 61_000, due[len(due) // 2] + 1
                count, from_ms, to_ms = self.engine.count(topic, lo, hi)
                assert (
                    from_ms <= lo
                    and hi <= to_ms
                    and (from_ms, to_ms) == (lo - lo % MINUTE_MS, hi + (-hi) % MINUTE_MS)
                )
                assert count == sum(1 for t in due if from_ms <= t < to_ms)

    @invariant()
    def scheduled_never_fired(self) -> None:
        assert all(self.state[mid] is State.SCHEDULED for _, mid in self.pending)


EngineModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("TIMERWHEEL_MODEL_EXAMPLES", "40")),
    stateful_step_count=35,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestEngineModel = EngineModel.TestCase
