"""timerwheel.wheels.lateness: the recent fire lateness per minute that Stats reports."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.lateness import (
    BOUNDS_MS,
    MINUTE_MS,
    LatenessMinute,
    RecentLateness,
    bucket_counts,
)


def test_percentiles_are_bucket_bounds_capped_by_the_exact_maximum():
    recent = RecentLateness()
    recent.observe(5 * MINUTE_MS + 10, [0] * 50 + [7] * 49 + [250])
    assert recent.recent(5 * MINUTE_MS + 20) == [LatenessMinute(5 * MINUTE_MS, 100, 0, 8, 250)]
    # 8 is the bound of the bucket holding 7 (buckets are about 26% wide)
    assert 8 in BOUNDS_MS and 7 not in BOUNDS_MS


def test_each_minute_is_its_own_row_and_old_minutes_drop_out():
    recent = RecentLateness(minutes=3)
    for minute in range(5):
        recent.observe(minute * MINUTE_MS + 1, [minute * 100])
    rows = recent.recent(4 * MINUTE_MS + 5)
    assert [(r.minute_ms, r.fires, r.max_ms) for r in rows] == [
        (2 * MINUTE_MS, 1, 200), (3 * MINUTE_MS, 1, 300), (4 * MINUTE_MS, 1, 400),
    ]  # fmt: skip
    assert recent.recent(10 * MINUTE_MS) == []  # nothing fired in the last 3 minutes


def test_a_late_stamped_commit_joins_the_latest_minute_and_nothing_is_empty():
    recent = RecentLateness()
    recent.observe(MINUTE_MS, [])
    assert recent.recent(MINUTE_MS) == []
    recent.observe(2 * MINUTE_MS, [3, 3])
    recent.observe(2 * MINUTE_MS - 1, [90_000_000])  # beyond the last bound
    (row,) = recent.recent(2 * MINUTE_MS)
    assert row == LatenessMinute(2 * MINUTE_MS, 3, 3, 90_000_000, 90_000_000)


@given(st.lists(st.integers(-5, 2 * BOUNDS_MS[-1]) | st.sampled_from(BOUNDS_MS), max_size=200))
def test_bucket_counts_are_a_search_per_value_counted(values):
    # bucket i holds (BOUNDS_MS[i - 1], BOUNDS_MS[i]], the last one what is above them all
    expected = Counter(bisect_left(BOUNDS_MS, value) for value in values)
    assert bucket_counts(sorted(values)) == dict(expected)
