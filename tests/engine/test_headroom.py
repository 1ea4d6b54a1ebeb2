"""engine/headroom.py: a commit's operations and the writer's queue bounded in time, from
the measured cost of a unit of work, within the fixed bounds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.engine.headroom import FIRST_COST_S, MIN_UNITS, Headroom


def headroom(**changes) -> Headroom:
    values = {"commit_budget_ms": 20, "queue_budget_ms": 1_000, "max_take": 20_000,
              "max_queued": 200_000} | changes  # fmt: skip
    return Headroom(**values)


def test_before_any_commit_it_assumes_a_slow_unit():
    room = headroom()
    assert room.take == int(0.020 / FIRST_COST_S)  # 400
    assert room.queue == int(1.0 / FIRST_COST_S)  # 20,000


def test_it_follows_the_measured_cost():
    room = headroom()
    for _ in range(60):
        room.committed(1_000, 0.010)  # 10 µs a unit
    assert room.cost_s == pytest.approx(10e-6, rel=0.01)
    assert room.take in range(1_990, 2_001)  # 20 ms of 10 µs units
    assert room.queue in range(99_000, 100_001)  # 1 s of them
    for _ in range(60):
        room.committed(1_000, 0.100)  # the machine became ten times slower
    assert room.take in range(199, 201)
    assert room.queue_ms(10_000) in range(990, 1_010)


def test_the_fixed_bounds_hold_however_fast_the_writer():
    room = headroom(max_take=5, max_queued=10)
    for _ in range(60):
        room.committed(1_000, 1e-6)
    assert room.take == 5 and room.queue == 10


def test_a_very_slow_writer_still_takes_one_and_queues_a_commit():
    room = headroom()
    for _ in range(60):
        room.committed(100, 10.0)  # 100 ms a unit
    assert room.take == 1
    assert room.queue == 10  # 1 s of them, above one commit's


def test_small_commits_and_empty_timings_teach_nothing():
    room = headroom()
    room.committed(MIN_UNITS - 1, 5.0)
    room.committed(1_000, 0.0)
    assert room.cost_s == FIRST_COST_S


@given(
    st.lists(st.tuples(st.integers(0, 50_000), st.floats(0, 5, allow_nan=False)), max_size=40),
    st.integers(1, 1_000), st.integers(1, 10_000), st.integers(1, 50_000),
    st.integers(1, 500_000),
)  # fmt: skip
def test_limits_stay_within_their_bounds(commits, commit_ms, queue_ms, max_take, max_queued):
    room = headroom(commit_budget_ms=commit_ms, queue_budget_ms=queue_ms, max_take=max_take,
                    max_queued=max_queued)  # fmt: skip
    for units, seconds in commits:
        room.committed(units, seconds)
        assert room.cost_s > 0
        assert 1 <= room.take <= max_take
        assert min(room.take, max_queued) <= room.queue <= max_queued
