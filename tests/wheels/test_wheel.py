"""Slot math of the one wheel type."""

from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.wheel import HOUR_WHEEL, LEVELS, MINUTE_WHEEL, SECOND_WHEEL


def test_levels_are_instances_of_one_type_from_fine_to_coarse():
    assert LEVELS == (SECOND_WHEEL, MINUTE_WHEEL, HOUR_WHEEL)
    assert {type(level) for level in LEVELS} == {type(SECOND_WHEEL)}
    assert [level.slot_ms for level in LEVELS] == [1_000, 60_000, 3_600_000]


@given(st.sampled_from(LEVELS), st.integers(0, 2**62))
def test_a_time_lies_in_its_slot(level, t_ms):
    start, end = level.slot_range_ms(t_ms)
    assert start <= t_ms < end
    assert end - start == level.slot_ms
    assert start % level.slot_ms == 0


@given(st.sampled_from(LEVELS), st.integers(0, 2**62))
def test_next_boundary_is_strictly_after(level, t_ms):
    boundary = level.next_boundary_after_ms(t_ms)
    assert t_ms < boundary <= t_ms + level.slot_ms
    assert boundary % level.slot_ms == 0
