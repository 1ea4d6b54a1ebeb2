"""The clock-step detector (timerwheel.wheels.clock_step), pure: readings in, verdicts out; and the
virtual clock's wall steps it is tested with in the engine (tests/engine/test_engine_clock.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.clock_step import ClockStep, ClockSteps
from timerwheel.wheels.settings import Settings, SettingsError

THRESHOLD_MS = 1_000


def feed(detector: ClockSteps, readings) -> tuple[ClockSteps, list[ClockStep]]:
    steps = []
    for wall_ms, monotonic_ms in readings:
        detector, step = detector.observe(wall_ms, monotonic_ms)
        if step is not None:
            steps.append(step)
    return detector, steps


def test_the_first_reading_is_only_a_reference():
    detector, step = ClockSteps(THRESHOLD_MS).observe(1_700_000_000_000, 5)
    assert step is None and detector.wall_ms == 1_700_000_000_000 and detector.monotonic_ms == 5


def test_a_jump_back_and_one_forward_are_counted_by_direction_with_their_sizes():
    readings = [(10_000, 0), (11_000, 1_000), (1_000, 1_500), (3_601_500, 2_000)]
    detector, steps = feed(ClockSteps(THRESHOLD_MS), readings)
    assert steps == [ClockStep(-10_500, 11_000, 1_000), ClockStep(3_600_000, 1_000, 3_601_500)]
    assert [s.direction for s in steps] == ["backward", "forward"]
    assert (detector.forward, detector.backward, detector.last) == (1, 1, steps[-1])


def test_the_threshold_itself_is_not_a_step():
    _, steps = feed(ClockSteps(THRESHOLD_MS), [(0, 0), (THRESHOLD_MS, 0), (0, 0)])
    assert steps == []
    _, steps = feed(ClockSteps(THRESHOLD_MS), [(0, 0), (THRESHOLD_MS + 1, 0)])
    assert [s.size_ms for s in steps] == [THRESHOLD_MS + 1]


@given(
    advances=st.lists(st.integers(0, 10**7), min_size=1, max_size=50),
    noise=st.lists(st.integers(-THRESHOLD_MS, THRESHOLD_MS), min_size=50, max_size=50),
    step_at=st.integers(0, 49),
    step_ms=st.integers(THRESHOLD_MS + 1, 10 * 86_400_000)
    | st.integers(-(10**9), -THRESHOLD_MS - 1),
)
def test_exactly_the_injected_step_is_found_whatever_the_drift_and_pauses(
    advances, noise, step_at, step_ms
):
    """Time passing (however long between readings) with jitter within the threshold
    between readings is never a step; one wall-clock jump among them is found once, with
    its size."""
    wall, monotonic = 1_700_000_000_000, 0
    readings, injected = [(wall, monotonic)], False
    for index, advance in enumerate(advances):
        monotonic += advance
        if index == step_at:
            wall, injected = wall + advance + step_ms, True
        else:
            wall += advance + noise[index]
        readings.append((wall, monotonic))
    detector, steps = feed(ClockSteps(THRESHOLD_MS), readings)
    if not injected:
        assert steps == []
    else:
        assert [s.size_ms for s in steps] == [step_ms]
        assert (detector.forward, detector.backward) == ((1, 0) if step_ms > 0 else (0, 1))


def test_virtual_clock_steps_move_the_wall_clock_alone():
    clock = VirtualClock(1_000_000)
    clock.advance(500)
    assert (clock.now_ms(), clock.monotonic_ms()) == (1_000_500, 500)
    assert clock.step_wall(-10_000) == 990_500 and clock.monotonic_ms() == 500
    clock.step_wall(3_600_000)
    assert (clock.now_ms(), clock.monotonic_ms()) == (4_590_500, 500)
    with pytest.raises(ValueError, match="delta_ms=-1: time only passes forward"):
        clock.advance(-1)


@pytest.mark.parametrize("bad", [0, 9, 3_600_001, -5, True, "1s"])
def test_the_threshold_setting_is_validated_showing_the_value(bad):
    with pytest.raises(SettingsError, match=f"clock_step_threshold_ms={bad!r}: must be 10ms..1h"):
        Settings(clock_step_threshold_ms=bad)
    assert Settings().clock_step_threshold_ms == 1_000
