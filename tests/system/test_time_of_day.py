"""The suite proves it does not depend on the time of day it runs at.

Every test marked `wallclock` runs a server on the real clock (in process or as a
`timerwheel serve` subprocess) and asserts something the time of day could change: which
wheel a timer sits in, when it fires, what a time-range List or Count sees. Here they run
again in a pytest subprocess with every test's start pinned (tests/conftest.py,
TIMERWHEEL_TEST_TIME_OF_DAY; servers get Settings.clock_offset_ms) to the worst moments:

* 54:59.000 and 55:00.000: either side of the start of the hour -> minute cascade of the
  next hour (`hour_cascade_lead_ms`, 5 min): from hh:55 a timer one hour out sits in the
  minute wheel (CI once failed for five minutes of every hour on exactly that);
* 59:10.000: the start of the minute -> second cascade of the next hour's first minute
  (`minute_cascade_lead_ms`, 50 s), with the hour cascade still running;
* 59:59.900 and 00:00.000: either side of the hour boundary itself.

The rest of the suite uses a virtual clock (its time is fixed by the test, whatever the
hour) or does not assert anything a time of day could change.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.time_of_day import TIME_OF_DAY_ENV, offset_to

from timerwheel.wheels.settings import HOUR_MS, Settings

pytestmark = pytest.mark.timeout(900)

WORST_MOMENTS = ("54:59.000", "55:00.000", "59:10.000", "59:59.900", "00:00.000")
TESTS = Path(__file__).resolve().parents[1]  # the whole suite: tests/


def test_the_worst_moments_are_the_default_cascades_starts():
    """If a default lead changes, the moments above must move with it."""
    defaults = Settings()
    hour_cascade_starts = HOUR_MS - defaults.hour_cascade_lead_ms
    minute_cascade_starts = HOUR_MS - defaults.minute_cascade_lead_ms
    moments_ms = {offset_to(moment, 0) for moment in WORST_MOMENTS}
    assert {hour_cascade_starts - 1_000, hour_cascade_starts} <= moments_ms
    assert minute_cascade_starts in moments_ms


def test_offset_to_reaches_the_moment_within_the_hour():
    hour = 3_600_000
    base = 1_795_300_000_000 - 1_795_300_000_000 % hour  # an hour boundary
    assert offset_to("55:00.000", base + 10 * 60_000) == 45 * 60_000
    assert offset_to("00:00.000", base + 59 * 60_000) == 60_000
    assert offset_to("59:59.900", base + 59 * 60_000 + 59_900) == 0
    for now_ms in (base + 1, base + 1_234_567, base + hour - 1):
        assert (now_ms + offset_to("54:59.000", now_ms)) % hour == 54 * 60_000 + 59_000
    with pytest.raises(ValueError, match="not a moment of an hour"):
        offset_to("60:00.000", base)


@pytest.mark.system  # re-runs every `wallclock` test, five times
@pytest.mark.parametrize("moment", WORST_MOMENTS)
def test_wallclock_tests_pass_at_the_worst_moments_of_an_hour(moment, tmp_path):
    env = {**os.environ, TIME_OF_DAY_ENV: moment}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-m", "wallclock", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "t"), str(TESTS)],
        env=env, capture_output=True, text=True, timeout=800,
    )  # fmt: skip
    tail = "\n".join(done.stdout.splitlines()[-40:])
    assert done.returncode == 0, f"wallclock tests pinned at hh:{moment}:\n{tail}"
    assert " passed" in tail and "deselected" in tail
