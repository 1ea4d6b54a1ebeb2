"""The catch-up bounds of a recurring series, pure (`timerwheel.wheels.recurrence`): which
missed occurrence fires first (`catch_up_from`) and where the series goes on after each
(`next_occurrence_ms`); the engine's view: tests/engine/test_engine_schedules.py."""

from __future__ import annotations

from timerwheel.wheels.domain import MissedPolicy, Repeat
from timerwheel.wheels.recurrence import catch_up_from, first_after, next_occurrence_ms

MIN = 60_000
EACH = MissedPolicy.FIRE_EACH


def walk(repeat: Repeat, at_ms: int, now_ms: int) -> tuple[list[int], int]:
    """The occurrences one catch-up at `now_ms` fires, and the series' next time."""
    at_ms = catch_up_from(repeat, at_ms, now_ms)
    times: list[int] = []
    while at_ms <= now_ms:
        times.append(at_ms)
        at_ms = next_occurrence_ms(repeat, at_ms, now_ms, len(times))
    return times, at_ms


def test_without_bounds_the_policies_are_as_before():
    assert walk(Repeat(every_ms=MIN, missed=EACH), 0, 3 * MIN + 5) == (
        [0, MIN, 2 * MIN, 3 * MIN],
        4 * MIN,
    )
    assert walk(Repeat(every_ms=MIN), 0, 3 * MIN + 5) == ([0], 4 * MIN)


def test_max_catch_up_fires_the_oldest_then_goes_on_after_now():
    repeat = Repeat(every_ms=MIN, missed=EACH, max_catch_up=2)
    assert walk(repeat, 0, 10 * MIN + 5) == ([0, MIN], 11 * MIN)
    assert walk(repeat, 0, 5) == ([0], MIN)  # on time: one, as always


def test_the_window_keeps_the_interval_grid_and_may_leave_nothing():
    repeat = Repeat(every_ms=MIN, missed=EACH, catch_up_window_ms=2 * MIN + 30_000)
    assert walk(repeat, 0, 10 * MIN + 5) == ([8 * MIN, 9 * MIN, 10 * MIN], 11 * MIN)
    hourly = Repeat(every_ms=60 * MIN, catch_up_window_ms=10 * MIN)
    assert walk(hourly, 0, 200 * MIN) == ([], 240 * MIN)
    assert catch_up_from(hourly, 0, 5 * MIN) == 0  # late by less than the window: fires


def test_a_cron_window_and_first_after():
    repeat = Repeat(cron="*/10 * * * *", missed=EACH, catch_up_window_ms=25 * MIN)
    # 1970-01-01 00:00 UTC is a match; now 01:03: inside the window 00:38 .. 01:03
    assert walk(repeat, 0, 63 * MIN) == ([40 * MIN, 50 * MIN, 60 * MIN], 70 * MIN)
    assert first_after(repeat, 0, 63 * MIN) == 70 * MIN
    assert first_after(Repeat(every_ms=7 * MIN), 0, 63 * MIN) == 70 * MIN
