"""The scheduler core: where a timer goes, what to cascade next, what is due to fire.

Pure decisions over integer milliseconds; the store carries them out in RocksDB.

The levels
----------
Timers live in three wheels (`timerwheel.wheels.wheel.LEVELS`): second, minute, hour. Between each
pair of adjacent levels there is a *cascade* with a **horizon**: every timer due before
the horizon belongs to the lower level, every timer due at or after it to the upper one::

    wheel_second         wheel_minute            wheel_hour
    [ ... , S )          [ S , M )               [ M , ... )
            ^ horizon of the           ^ horizon of the
              minute->second cascade     hour->minute cascade

A new timer is placed by comparing its deliver time with the horizons, never with the
raw clock. That is what makes a send racing a cascade safe: the moment a cascade starts
it moves its horizon up, so every later send for that range goes straight to the lower
level and cannot land behind the range scan that is moving the slot.

Why cascades run ahead of the boundary
--------------------------------------
Timers fire only out of the second wheel. If the minute slot [S, S+60s) were moved into
the second wheel at the instant S, its first timers would already be late by however long
the move takes (a slot of 200k timers takes a noticeable fraction of a second). So each
cascade starts a configurable *lead* before its boundary: once `now + lead >= horizon`,
the horizon advances to the next boundary of the upper level after `now + lead`, and the
range [old horizon, new horizon) is moved down in chunks. A lower cascade never advances
past the part of the level above it that is complete, so nothing is moved down from a
level that has not received it yet. After a long stop the horizon jumps over every
boundary that passed at once: the range scan covers many slots in one cascade.

Moves are chunked: `pending_from` remembers the first upper-wheel key still to move, so a
huge slot never blocks the writer, and a crash mid-cascade resumes from there.

Pacing
------
A started cascade need not move its slot at once: its first timer is a lead away. Paced
(`finish_ahead_ms` given), it spreads the moves evenly over its lead instead of running
its chunks back to back in one block: the slot's deliver times are mapped linearly onto
the window from the cascade's start to `finish_ahead_ms` before the slot begins::

    start = slot - lead                 slot - finish_ahead       slot
    |------------ window -------------------|------------------------|
    moved: timers due before slot + slot_ms * elapsed / window

so a slot whose timers are spread evenly over its deliver times moves at an even rate,
and every timer is moved at least `finish_ahead_ms` (and up to a lead and a slot) before
it is due. The bound advances in steps of `PACE_STEP_MS`, one writer wake-up a step, and
`pending_from` rests at the bound between steps (persisted like any progress, so a
restart resumes the pace). Timers of earlier slots (a cascade over several slots after a
long stop) are overdue or nearly so and move at once. The hour cascade's pace must end
before the next hour's first minute cascade starts, or that one would wait for it
(`Settings.cascade_finish_ahead_ms` sees to that).

Firing
------
The second wheel is drained continuously: every key up to `now` fires. `fire_from` is the
first key not yet fired; all keys below it are gone (fired), so scans start there and
never wade through the tombstones of fired timers. A timer whose time is already `<= now`
when it is sent or cascaded fires at once instead of entering a wheel: that keeps every
wheel key above `fire_from`.

The fire tick
-------------
With no request to wake it, the writer sleeps until the next due timer, but wakes no
sooner than one *tick* (`fire_tick_ms`) after the last group commit that fired
anything. When timers fall due every millisecond, the ones due within a tick then fire
together in one commit; a timer due after a quiet spell fires at its own millisecond.
Never before its time, and less than a tick after it: the last fire came before the
timer was due, so the wake-up is at most that fire plus a tick. A group commit costs
much the same whatever it carries, and timers due every millisecond would cost one a
millisecond: at steady rates a tick of a few milliseconds makes about a third fewer
commits and takes a sixth or more off the server's CPU, for a median up to a tick later
and a tail no worse (docs/lab-log.md has the runs). A request's commit still fires
whatever is due at that moment.
When the last fire was is a pacing hint, not state: it is not persisted, and after a
restart the first due timer fires at once.

`now_ms` is monotonic: the max of every clock reading (and of the persisted value after
a restart), so a clock stepping back can never strand a key below `fire_from`.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass, replace
from typing import NamedTuple

from timerwheel.wheels.wheel import LEVELS, Wheel

_LEVEL_NAMES = tuple(level.name for level in LEVELS)


class TimerKey(NamedTuple):
    """A position in a wheel: keys sort by time, then by message id."""

    deliver_at_ms: int
    message_id: str

    @classmethod
    def start_of(cls, t_ms: int) -> TimerKey:
        """The smallest key at time `t_ms`."""
        return cls(t_ms, "")


@dataclass(frozen=True, slots=True)
class CascadeState:
    """Cascade from `LEVELS[i+1]` into `LEVELS[i]`."""

    horizon_ms: int
    pending_from: TimerKey | None = None  # first upper key still to move, None when done

    @property
    def complete_below_ms(self) -> int:
        """Every timer due before this is already in the lower level (or fired)."""
        return self.horizon_ms if self.pending_from is None else self.pending_from.deliver_at_ms


@dataclass(frozen=True, slots=True)
class SchedulerState:
    """Everything the scheduler needs to resume; persisted in `meta`, each batch writing
    the values it changed (timerwheel.store.timer_store.TimerStore.stage_state)."""

    now_ms: int
    cascades: tuple[CascadeState, ...]  # cascades[i] moves LEVELS[i+1] -> LEVELS[i]
    fire_from: TimerKey
    fire_seq: int = 0  # last fire sequence handed out
    # Fire sequences handed out since the scheduler was made that fired nothing (a due
    # series that skipped its occurrence: paused, or outside its catch-up window), so the
    # engine's count of fired, un-acked messages leaves them out. Not persisted.
    unused_fire_seqs: int = 0


@dataclass(frozen=True, slots=True)
class CascadeTask:
    """Move upper-wheel keys in [from_key, (to_ms, "")) into the lower wheel."""

    index: int
    upper: Wheel
    lower: Wheel
    from_key: TimerKey
    to_ms: int


PACE_STEP_MS = 1_000  # a paced cascade's bound moves this often (see "Pacing")


class Scheduler:
    """Holds the horizons and cursors; decides, never performs I/O."""

    def __init__(
        self,
        state: SchedulerState,
        leads_ms: tuple[int, ...],
        fire_tick_ms: int = 1,
        finish_ahead_ms: tuple[int, ...] | None = None,
    ) -> None:
        if len(state.cascades) != len(LEVELS) - 1 or len(leads_ms) != len(LEVELS) - 1:
            raise ValueError("one cascade state and one lead per adjacent pair of levels")
        if fire_tick_ms < 1:
            raise ValueError(f"fire_tick_ms={fire_tick_ms}: must be at least 1")
        if finish_ahead_ms is not None and not all(
            0 <= finish <= lead for finish, lead in zip(finish_ahead_ms, leads_ms, strict=True)
        ):
            raise ValueError(f"finish_ahead_ms={finish_ahead_ms}: each must be 0..its lead")
        self._leads_ms = leads_ms
        # None: unpaced, every cascade's chunks back to back (finishing at its lead).
        self._finish_ahead_ms = finish_ahead_ms or leads_ms
        self._fire_tick_ms = fire_tick_ms
        self._last_fire_ms: int | None = None  # see "The fire tick": a hint, not state
        self._set_state(state)

    def _set_state(self, state: SchedulerState) -> None:
        self._state = state
        # Placement runs once per send: keep the horizons in a plain tuple.
        self._horizons = tuple(c.horizon_ms for c in state.cascades)

    @classmethod
    def fresh(cls, now_ms: int, leads_ms: tuple[int, ...]) -> Scheduler:
        """A scheduler for an empty store: horizons already where they would be at `now_ms`."""
        empty = tuple(CascadeState(horizon_ms=now_ms) for _ in leads_ms)
        scheduler = cls(SchedulerState(now_ms, empty, TimerKey.start_of(now_ms + 1)), leads_ms)
        # With no timers stored, advancing every horizon to its target moves nothing.
        while tasks := scheduler.cascade_tasks():
            for task in tasks:
                scheduler.cascade_progress(task, next_from=None)
        return scheduler

    # -- state -------------------------------------------------------------------------
    @property
    def state(self) -> SchedulerState:
        return self._state

    def restore(self, state: SchedulerState) -> None:
        """Undo decisions whose batch failed to commit."""
        self._set_state(state)

    @property
    def now_ms(self) -> int:
        return self._state.now_ms

    def observe(self, clock_ms: int) -> int:
        """Advance monotonic time to a clock reading; return it."""
        if clock_ms > self._state.now_ms:
            self._state = replace(self._state, now_ms=clock_ms)
        return self._state.now_ms

    # -- placement ---------------------------------------------------------------------
    def placement(self, deliver_at_ms: int) -> Wheel | None:
        """The wheel a timer due at `deliver_at_ms` goes to, or None: it is due, fire it now."""
        if deliver_at_ms <= self._state.now_ms:
            return None
        return LEVELS[self._level_index(deliver_at_ms)]

    def _level_index(self, deliver_at_ms: int) -> int:
        # Horizons ascend level by level, so the level is the number of horizons <= t.
        return bisect_right(self._horizons, deliver_at_ms)

    def wheel_names(self, deliver_times_ms: list[int]) -> list[str | None]:
        """`placement` for a whole batch: a wheel name per time, None where it is due now."""
        now_ms, horizons = self._state.now_ms, self._horizons
        return [
            None if t <= now_ms else _LEVEL_NAMES[bisect_right(horizons, t)]
            for t in deliver_times_ms
        ]

    def wheel_candidates(self, deliver_at_ms: int) -> tuple[Wheel, ...]:
        """Wheels that may hold a scheduled timer due then (two while a cascade moves it)."""
        index = self._level_index(deliver_at_ms)
        if index + 1 < len(LEVELS):
            pending = self._state.cascades[index].pending_from
            if pending is not None and deliver_at_ms >= pending.deliver_at_ms:
                return (LEVELS[index], LEVELS[index + 1])
        return (LEVELS[index],)

    # -- cascades ----------------------------------------------------------------------
    def cascade_tasks(self) -> list[CascadeTask]:
        """The chunk of work each cascade should do now, top level first.

        Starting a cascade (advancing its horizon) happens here; the store then moves the
        returned ranges and reports back through `cascade_progress`.
        """
        tasks = []
        for index in reversed(range(len(self._state.cascades))):
            self._maybe_start(index)
            pending = self._state.cascades[index].pending_from
            if pending is not None and self._may_move_now(index):
                to_ms = self._paced_to_ms(index)
                tasks.append(CascadeTask(index, LEVELS[index + 1], LEVELS[index], pending, to_ms))
        return tasks

    def _pace(self, index: int) -> tuple[int, int, int]:
        """(the window's start, its length, the last slot's start) of a started cascade."""
        horizon_ms = self._state.cascades[index].horizon_ms
        last_slot_ms = horizon_ms - LEVELS[index + 1].slot_ms
        lead_ms = self._leads_ms[index]
        return last_slot_ms - lead_ms, lead_ms - self._finish_ahead_ms[index], last_slot_ms

    def _paced_to_ms(self, index: int) -> int:
        """The cascade may have moved every timer due before this by now (see "Pacing")."""
        window_start_ms, window_ms, last_slot_ms = self._pace(index)
        elapsed_ms = self._state.now_ms - window_start_ms
        if elapsed_ms >= window_ms:
            return self._state.cascades[index].horizon_ms
        stepped_ms = max(elapsed_ms, 0) // PACE_STEP_MS * PACE_STEP_MS
        return last_slot_ms + stepped_ms * LEVELS[index + 1].slot_ms // window_ms

    def _target_horizon_ms(self, index: int) -> int:
        upper = LEVELS[index + 1]
        target = upper.next_boundary_after_ms(self._state.now_ms + self._leads_ms[index])
        if index + 1 < len(self._state.cascades):
            # Never move down what the level above has not fully received yet.
            ready_below = self._state.cascades[index + 1].complete_below_ms
            target = min(target, upper.slot_start_ms(ready_below))
        return target

    def _maybe_start(self, index: int) -> None:
        cascade = self._state.cascades[index]
        if cascade.pending_from is not None:
            return
        target = self._target_horizon_ms(index)
        if target > cascade.horizon_ms:
            started = CascadeState(target, TimerKey.start_of(cascade.horizon_ms))
            self._set_cascade(index, started)

    def cascade_progress(self, task: CascadeTask, next_from: TimerKey | None) -> None:
        """Record that the chunk ended before `next_from` (None: the task's range is fully
        moved; a paced cascade then rests at the task's end until its next step)."""
        cascade = self._state.cascades[task.index]
        if next_from is None and task.to_ms < cascade.horizon_ms:
            next_from = TimerKey.start_of(task.to_ms)
        self._set_cascade(task.index, replace(cascade, pending_from=next_from))

    def _set_cascade(self, index: int, cascade: CascadeState) -> None:
        cascades = list(self._state.cascades)
        cascades[index] = cascade
        self._set_state(replace(self._state, cascades=tuple(cascades)))

    # -- firing ------------------------------------------------------------------------
    def fire_range(self) -> tuple[TimerKey, int]:
        """Second-wheel keys from `fire_from` through `now_ms` (inclusive) are due."""
        return self._state.fire_from, self._state.now_ms

    def fire_progress(self, through_ms: int, next_from: TimerKey | None) -> None:
        """A drain up to `through_ms` stopped before `next_from` (None: drained through it)."""
        fire_from = next_from if next_from is not None else TimerKey.start_of(through_ms + 1)
        self._state = replace(self._state, fire_from=fire_from)

    def take_fire_seqs(self, count: int) -> int:
        """Reserve `count` fire sequence numbers; return the first."""
        first = self._state.fire_seq + 1
        self._state = replace(self._state, fire_seq=self._state.fire_seq + count)
        self._last_fire_ms = self._state.now_ms
        return first

    def fire_seq_unused(self) -> None:
        """One fire sequence taken fired nothing (see `SchedulerState.unused_fire_seqs`)."""
        self._state = replace(self._state, unused_fire_seqs=self._state.unused_fire_seqs + 1)

    # -- waking ------------------------------------------------------------------------
    def busy(self) -> bool:
        """True while a cascade has a range it may move now or could start now.

        Finishing an upper cascade can unblock a lower one in the same instant, so
        "nothing pending" alone does not mean idle. A paced cascade resting at its bound
        is not busy: it has a wake-up at its next step (`next_wakeup_ms`).
        """
        return any(
            self._may_move_now(index) or self._target_horizon_ms(index) > cascade.horizon_ms
            for index, cascade in enumerate(self._state.cascades)
        )

    def _may_move_now(self, index: int) -> bool:
        pending = self._state.cascades[index].pending_from
        return pending is not None and pending.deliver_at_ms < self._paced_to_ms(index)

    def next_wakeup_ms(self, next_due_ms: int | None) -> int:
        """When the writer must run next with no requests: the next due timer's time, but
        not within a tick of the last fire (see "The fire tick"), a cascade's start, or a
        paced cascade's next step."""
        wake = [
            c.horizon_ms - lead
            for c, lead in zip(self._state.cascades, self._leads_ms, strict=True)
        ]
        for index, cascade in enumerate(self._state.cascades):
            if cascade.pending_from is not None:
                wake.append(self._next_step_ms(index))
        if next_due_ms is not None:
            wake.append(self._fire_wakeup_ms(next_due_ms))
        return min(wake)

    def _next_step_ms(self, index: int) -> int:
        """When a started cascade's paced bound next moves (now, if it already may move)."""
        if self._may_move_now(index):
            return self._state.now_ms
        window_start_ms, window_ms, _ = self._pace(index)
        elapsed_ms = max(self._state.now_ms - window_start_ms, 0)
        next_step_ms = (elapsed_ms // PACE_STEP_MS + 1) * PACE_STEP_MS
        return window_start_ms + min(next_step_ms, window_ms)  # the window's end is a step

    def _fire_wakeup_ms(self, next_due_ms: int) -> int:
        """`next_due_ms`, or a tick after the last fire if that is later (the pacing)."""
        if self._last_fire_ms is None:
            return next_due_ms
        return max(next_due_ms, self._last_fire_ms + self._fire_tick_ms)
