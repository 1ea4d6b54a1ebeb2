"""The time of day a test runs at.

TIMERWHEEL_TEST_TIME_OF_DAY="MM:SS.fff" pins every test's start to that moment of an hour
(tests/system/test_time_of_day.py re-runs the `wallclock` tests at the worst moments): servers
started by the conftest fixtures run with Settings.clock_offset_ms, and `wall_ms()`, the
tests' own notion of now, is shifted by the same offset. Unset: no shift.

The offset is set by the autouse fixture `pinned_time_of_day` (tests/conftest.py) at each
test's start and read here and by the fixtures that start servers.
"""

from __future__ import annotations

import time

TIME_OF_DAY_ENV = "TIMERWHEEL_TEST_TIME_OF_DAY"
_clock_offset_ms = 0


def offset_to(time_of_day: str, now_ms: int) -> int:
    """The offset in [0, 1 h) that moves `now_ms` to the next "MM:SS.fff" of an hour."""
    minutes, seconds = time_of_day.split(":")
    target_ms = round((int(minutes) * 60 + float(seconds)) * 1000)
    if not 0 <= target_ms < 3_600_000:
        raise ValueError(f"{TIME_OF_DAY_ENV}={time_of_day!r}: not a moment of an hour")
    return (target_ms - now_ms % 3_600_000) % 3_600_000


def clock_offset_ms() -> int:
    """The running test's offset (0 unless pinned)."""
    return _clock_offset_ms


def set_clock_offset_ms(offset_ms: int) -> None:
    global _clock_offset_ms
    _clock_offset_ms = offset_ms


def wall_ms() -> int:
    return time.time_ns() // 1_000_000 + _clock_offset_ms
