"""The scheduler core in virtual time: placement, cascade timing, firing ranges."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.scheduler import CascadeState, Scheduler, SchedulerState, TimerKey
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS
from timerwheel.wheels.wheel import HOUR_WHEEL, MINUTE_WHEEL, SECOND_WHEEL

LEADS = (10_000, 300_000)  # minute->second, hour->minute
T0 = 1_700_002_800_000 - 20_000  # 20 s before an hour boundary


def run_cascades(scheduler: Scheduler) -> list:
    """Complete every cascade as if the wheels were empty; return the tasks seen."""
    seen = []
    while tasks := scheduler.cascade_tasks():
        for task in tasks:
            seen.append(task)
            scheduler.cascade_progress(task, None)
    return seen


def test_fresh_horizons_lie_ahead_of_now_by_more_than_the_leads():
    scheduler = Scheduler.fresh(T0, LEADS)
    second, minute = scheduler.state.cascades
    assert second.horizon_ms > T0 + LEADS[0] and second.horizon_ms % MINUTE_MS == 0
    assert minute.horizon_ms > T0 + LEADS[1] and minute.horizon_ms % HOUR_MS == 0
    assert second.horizon_ms <= minute.horizon_ms
    assert not scheduler.busy()


def test_placement_compares_with_the_horizons_not_the_clock():
    scheduler = Scheduler.fresh(T0, LEADS)
    second, minute = scheduler.state.cascades
    assert scheduler.placement(T0) is None  # due: fire at once
    assert scheduler.placement(T0 + 1) is SECOND_WHEEL
    assert scheduler.placement(second.horizon_ms - 1) is SECOND_WHEEL
    assert scheduler.placement(second.horizon_ms) is MINUTE_WHEEL
    assert scheduler.placement(minute.horizon_ms - 1) is MINUTE_WHEEL
    assert scheduler.placement(minute.horizon_ms) is HOUR_WHEEL
    assert scheduler.placement(minute.horizon_ms + 400 * 24 * HOUR_MS) is HOUR_WHEEL


def test_minute_cascade_starts_exactly_one_lead_before_the_boundary():
    scheduler = Scheduler.fresh(T0, LEADS)
    horizon = scheduler.state.cascades[0].horizon_ms
    scheduler.observe(horizon - LEADS[0] - 1)
    assert [t.lower for t in scheduler.cascade_tasks()] == []
    scheduler.observe(horizon - LEADS[0])
    (task,) = scheduler.cascade_tasks()
    assert (task.upper, task.lower) == (MINUTE_WHEEL, SECOND_WHEEL)
    assert task.from_key == TimerKey.start_of(horizon) and task.to_ms == horizon + MINUTE_MS
    # The horizon moved when the cascade started: a send racing it goes below.
    assert scheduler.placement(horizon + 5) is SECOND_WHEEL


def test_a_chunked_cascade_resumes_where_it_stopped_and_blocks_the_level_below():
    scheduler = Scheduler.fresh(T0, LEADS)
    hour_horizon = scheduler.state.cascades[1].horizon_ms
    scheduler.observe(hour_horizon - LEADS[1])
    (hour_task,) = [t for t in scheduler.cascade_tasks() if t.upper is HOUR_WHEEL]
    cut = TimerKey(hour_horizon + 90_000, "m")
    scheduler.cascade_progress(hour_task, cut)
    assert scheduler.state.cascades[1].complete_below_ms == cut.deliver_at_ms
    # Time passes to where the minute cascade would cross into the half-moved hour.
    scheduler.observe(hour_horizon + 2 * MINUTE_MS)
    tasks = {t.upper: t for t in scheduler.cascade_tasks()}
    assert tasks[HOUR_WHEEL].from_key == cut
    minute_task = tasks[MINUTE_WHEEL]
    assert minute_task.to_ms <= MINUTE_WHEEL.slot_start_ms(cut.deliver_at_ms)
    # A timer in the half-moved range may be in either wheel.
    assert scheduler.wheel_candidates(cut.deliver_at_ms + 1) == (MINUTE_WHEEL, HOUR_WHEEL)


def test_after_a_long_stop_one_cascade_covers_every_missed_slot():
    scheduler = Scheduler.fresh(T0, LEADS)
    old_hour = scheduler.state.cascades[1].horizon_ms
    scheduler.observe(T0 + 3 * 24 * HOUR_MS)
    tasks = run_cascades(scheduler)
    hour_tasks = [t for t in tasks if t.upper is HOUR_WHEEL]
    assert len(hour_tasks) == 1
    assert hour_tasks[0].from_key == TimerKey.start_of(old_hour)
    assert hour_tasks[0].to_ms > T0 + 3 * 24 * HOUR_MS + LEADS[1]


def test_firing_covers_through_now_and_resumes_after_a_cut():
    scheduler = Scheduler.fresh(T0, LEADS)
    scheduler.observe(T0 + 500)
    start, through = scheduler.fire_range()
    assert start == TimerKey.start_of(T0 + 1) and through == T0 + 500
    scheduler.fire_progress(through, TimerKey(T0 + 200, "k\x00"))
    assert scheduler.fire_range() == (TimerKey(T0 + 200, "k\x00"), T0 + 500)
    scheduler.fire_progress(T0 + 500, None)
    assert scheduler.fire_range()[0] == TimerKey.start_of(T0 + 501)


def test_time_never_goes_backwards():
    scheduler = Scheduler.fresh(T0, LEADS)
    scheduler.observe(T0 + 1_000)
    assert scheduler.observe(T0) == T0 + 1_000
    assert scheduler.placement(T0 + 999) is None


def test_fire_sequences_are_handed_out_once():
    scheduler = Scheduler.fresh(T0, LEADS)
    assert scheduler.take_fire_seqs(3) == 1
    assert scheduler.take_fire_seqs(2) == 4
    assert scheduler.state.fire_seq == 5


def test_restored_state_undoes_decisions():
    scheduler = Scheduler.fresh(T0, LEADS)
    saved = scheduler.state
    scheduler.observe(T0 + HOUR_MS)
    run_cascades(scheduler)
    scheduler.restore(saved)
    assert scheduler.state == saved


def test_next_wakeup_is_the_earlier_of_next_due_and_next_cascade_start():
    scheduler = Scheduler.fresh(T0, LEADS)
    second_start = scheduler.state.cascades[0].horizon_ms - LEADS[0]
    assert scheduler.next_wakeup_ms(None) == second_start
    assert scheduler.next_wakeup_ms(T0 + 5) == T0 + 5


def fired_at(scheduler: Scheduler, now_ms: int) -> Scheduler:
    """The scheduler after a group commit at `now_ms` that fired one timer."""
    scheduler.observe(now_ms)
    scheduler.take_fire_seqs(1)
    return scheduler


def test_with_no_fire_before_it_a_due_timer_wakes_the_writer_at_its_own_time():
    scheduler = Scheduler(Scheduler.fresh(T0, LEADS).state, LEADS, fire_tick_ms=10)
    assert scheduler.next_wakeup_ms(T0 + 3) == T0 + 3


def test_after_a_fire_the_writer_wakes_no_sooner_than_a_tick_later():
    scheduler = fired_at(Scheduler(Scheduler.fresh(T0, LEADS).state, LEADS, fire_tick_ms=10), T0)
    assert scheduler.next_wakeup_ms(T0 + 1) == T0 + 10  # fires with those due up to T0 + 10
    assert scheduler.next_wakeup_ms(T0 + 10) == T0 + 10
    assert scheduler.next_wakeup_ms(T0 + 25) == T0 + 25  # after a quiet spell: on time


def test_a_failed_fire_commit_keeps_the_pacing_hint_but_not_the_state():
    scheduler = Scheduler(Scheduler.fresh(T0, LEADS).state, LEADS, fire_tick_ms=10)
    saved = scheduler.state
    fired_at(scheduler, T0 + 1)
    scheduler.restore(saved)
    assert scheduler.state == saved
    assert scheduler.next_wakeup_ms(T0 + 2) == T0 + 11  # at most a tick later: a hint


# Wake-ups before T0 + 9 s: the first cascade starts at T0 + 10 s and would come first.
@given(st.integers(T0, T0 + 4_000), st.integers(1, 4_000), st.integers(1, 1_000))
def test_a_fire_tick_never_wakes_before_the_due_time_nor_a_tick_after(fired_ms, gap_ms, tick_ms):
    scheduler = Scheduler(Scheduler.fresh(T0, LEADS).state, LEADS, fire_tick_ms=tick_ms)
    due_ms = fired_at(scheduler, fired_ms).now_ms + gap_ms  # not due at the last fire
    wake_ms = scheduler.next_wakeup_ms(due_ms)
    assert due_ms <= wake_ms < due_ms + tick_ms and wake_ms >= fired_ms + tick_ms


def test_a_fire_tick_below_one_ms_is_refused():
    with pytest.raises(ValueError, match="fire_tick_ms=0"):
        Scheduler(Scheduler.fresh(T0, LEADS).state, LEADS, fire_tick_ms=0)


@given(st.lists(st.integers(1, 4 * HOUR_MS), min_size=1, max_size=30))
def test_horizons_only_grow_and_stay_ahead_of_now(steps):
    scheduler = Scheduler.fresh(T0, LEADS)
    now = T0
    for step in steps:
        before = scheduler.state.cascades
        now = scheduler.observe(now + step)
        run_cascades(scheduler)
        after = scheduler.state.cascades
        assert all(a.horizon_ms >= b.horizon_ms for a, b in zip(after, before, strict=True))
        assert after[0].horizon_ms > now + LEADS[0]
        assert after[1].horizon_ms > now + LEADS[1]
        assert after[0].horizon_ms <= after[1].horizon_ms


def test_state_must_match_the_levels():
    state = SchedulerState(T0, (CascadeState(T0),), TimerKey.start_of(T0))
    try:
        Scheduler(state, LEADS)
    except ValueError as exc:
        assert "one cascade state" in str(exc)
    else:
        raise AssertionError("a state with too few cascades was accepted")


# -- pacing ------------------------------------------------------------------------------
PACED_LEADS = (50_000, 300_000)
FINISH_AHEAD = (10_000, 60_000)  # the minute cascade's window is 40 s, the hour's 4 min


def paced(finish_ahead=FINISH_AHEAD) -> Scheduler:
    state = Scheduler.fresh(T0, PACED_LEADS).state
    return Scheduler(state, PACED_LEADS, finish_ahead_ms=finish_ahead)


def drive_minute_cascade(scheduler: Scheduler, due_ms: list[int], until_ms: int) -> dict:
    """A writer that runs only when `next_wakeup_ms` says, moving every timer its tasks
    cover (no chunk limit), through `until_ms`; when each minute-wheel timer moved down."""
    moved_at: dict[int, int] = {}
    for _ in range(10_000):
        now = scheduler.next_wakeup_ms(None)
        if now > until_ms:
            return moved_at
        scheduler.observe(now)
        assert scheduler.busy(), "woken for nothing"
        for task in scheduler.cascade_tasks():
            if task.upper is MINUTE_WHEEL:
                lo = task.from_key.deliver_at_ms
                for t in due_ms:
                    if lo <= t < task.to_ms:
                        assert t not in moved_at, "moved twice"
                        moved_at[t] = now
            scheduler.cascade_progress(task, None)
        assert not scheduler.busy()
    raise AssertionError("the wake-ups never reached the end")


def test_a_paced_cascade_moves_its_slot_evenly_and_finishes_ahead_of_it():
    scheduler = paced()
    slot_ms = scheduler.state.cascades[0].horizon_ms  # the next slot to move down
    due_ms = [slot_ms + i * 10 for i in range(6_000)]  # a timer every 10 ms of the slot
    moved_at = drive_minute_cascade(scheduler, due_ms, slot_ms)
    assert sorted(moved_at) == due_ms
    start_ms = slot_ms - PACED_LEADS[0]
    per_second: dict[int, int] = {}
    for t, at in moved_at.items():
        assert start_ms <= at <= slot_ms - FINISH_AHEAD[0] <= t - FINISH_AHEAD[0]
        per_second[at] = per_second.get(at, 0) + 1
    # 60 s of timers over a 40 s window: 1.5 s worth a step, one step a second.
    assert len(per_second) == 40 and max(per_second.values()) == 150


def test_a_paced_cascade_rests_at_its_bound_and_wakes_at_the_next_step():
    scheduler = paced()
    slot_ms = scheduler.state.cascades[0].horizon_ms
    start_ms = slot_ms - PACED_LEADS[0]
    scheduler.observe(start_ms + 2_500)
    (task,) = scheduler.cascade_tasks()
    assert task.from_key == TimerKey.start_of(slot_ms) and task.to_ms == slot_ms + 3_000
    assert scheduler.placement(slot_ms + 30_000) is SECOND_WHEEL  # the horizon moved at once
    scheduler.cascade_progress(task, None)
    assert scheduler.state.cascades[0].pending_from == TimerKey.start_of(slot_ms + 3_000)
    assert not scheduler.busy() and scheduler.next_wakeup_ms(None) == start_ms + 3_000
    # A timer not yet moved is looked for in both wheels, one moved in the lower one.
    assert scheduler.wheel_candidates(slot_ms + 3_000) == (SECOND_WHEEL, MINUTE_WHEEL)
    assert scheduler.wheel_candidates(slot_ms + 2_999) == (SECOND_WHEEL,)


def test_a_full_chunk_continues_at_once_within_the_bound():
    scheduler = paced()
    slot_ms = scheduler.state.cascades[0].horizon_ms
    scheduler.observe(slot_ms - PACED_LEADS[0] + 10_000)
    (task,) = scheduler.cascade_tasks()
    scheduler.cascade_progress(task, TimerKey(slot_ms + 700, "x\x00"))  # a chunk was full
    assert scheduler.busy()
    (task,) = scheduler.cascade_tasks()
    assert task.from_key == TimerKey(slot_ms + 700, "x\x00")


def test_after_a_long_stop_a_paced_cascade_moves_the_overdue_slots_at_once():
    scheduler = paced()
    old_horizon = scheduler.state.cascades[0].horizon_ms
    scheduler.observe(old_horizon + 10 * MINUTE_MS)
    (task,) = [t for t in scheduler.cascade_tasks() if t.upper is MINUTE_WHEEL]
    # The range ends a lead and up to a minute ahead: its last slot is paced, the
    # missed ones (due already) are not.
    assert task.from_key == TimerKey.start_of(old_horizon)
    assert task.to_ms >= old_horizon + 10 * MINUTE_MS


@given(st.integers(0, 50_000), st.lists(st.integers(0, MINUTE_MS - 1), min_size=1, max_size=50))
def test_every_paced_timer_moves_in_the_window_whatever_the_finish(finish_ms, offsets_ms):
    scheduler = paced((finish_ms, FINISH_AHEAD[1]))
    slot_ms = scheduler.state.cascades[0].horizon_ms
    due_ms = sorted({slot_ms + offset for offset in offsets_ms})
    moved_at = drive_minute_cascade(scheduler, due_ms, slot_ms)
    assert sorted(moved_at) == due_ms
    assert all(slot_ms - PACED_LEADS[0] <= at <= slot_ms - finish_ms for at in moved_at.values())


def test_a_paced_hour_cascade_is_done_before_the_hours_first_minute_cascade():
    scheduler = paced()
    hour_ms = scheduler.state.cascades[1].horizon_ms
    scheduler.observe(hour_ms - PACED_LEADS[1])
    run_cascades(scheduler)
    assert scheduler.state.cascades[1].pending_from is not None  # paced: still moving
    scheduler.observe(hour_ms - FINISH_AHEAD[1])
    run_cascades(scheduler)
    assert scheduler.state.cascades[1].pending_from is None
    assert scheduler.state.cascades[1].complete_below_ms == hour_ms + HOUR_MS


def test_a_finish_beyond_the_lead_is_refused():
    with pytest.raises(ValueError, match="finish_ahead_ms"):
        paced((60_000, 60_000))
