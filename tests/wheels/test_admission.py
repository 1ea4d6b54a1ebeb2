"""The send admission gate (timerwheel.wheels.admission) in virtual time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.admission import CONFIRM, FireLagGate, admit_fire_lag_problem
from timerwheel.wheels.domain import AdmissionRefused, Overloaded
from timerwheel.wheels.settings import Settings, SettingsError


def test_one_late_commit_does_not_close_it():
    gate = FireLagGate(20)
    assert not gate.observe(0, 500)  # a pause: one late commit, then a prompt one
    assert not gate.observe(1, 0)
    assert not gate.observe(2, 500)
    assert gate.refusal() is None and gate.lag_ms == 500


def test_late_commits_in_a_row_close_it_with_the_figure():
    gate = FireLagGate(20)
    for now in range(CONFIRM):
        refusing = gate.observe(now * 5, 21 + now)
    assert refusing
    message = gate.refusal()
    assert message is not None
    assert f"fire_lag_ms={20 + CONFIRM}" in message and "admit_fire_lag_ms=20" in message
    refused = gate.refused()
    assert isinstance(refused, AdmissionRefused) and isinstance(refused, Overloaded)
    assert str(refused) == message
    assert refused.retry_after_ms == gate.hold_ms == 20  # the gate cannot reopen sooner


def _closed(gate: FireLagGate, now_ms: int, lag_ms: int = 100) -> None:
    for _ in range(CONFIRM):
        gate.observe(now_ms, lag_ms)
    assert gate.refusing


def test_it_reopens_only_well_under_the_threshold_and_after_the_hold():
    gate = FireLagGate(20)
    _closed(gate, 1_000)
    assert gate.observe(1_005, 15)  # under the threshold, not under half of it
    assert gate.observe(1_010, 5)  # under half, but within the hold of the late ones
    assert gate.observe(1_019, 10)
    assert not gate.observe(1_020, 10)  # hold_ms (= admit_ms) after the last late one
    assert gate.refusal() is None and gate.refused() is None


def test_a_late_commit_while_closed_restarts_the_hold():
    gate = FireLagGate(20)
    _closed(gate, 0)
    assert gate.observe(15, 30)  # still late
    assert gate.observe(30, 0)  # 15 ms after it: held
    assert not gate.observe(35, 0)


def test_zero_turns_it_off_but_keeps_the_lag():
    gate = FireLagGate(0)
    for now in range(10):
        assert not gate.observe(now, 10_000)
    assert gate.lag_ms == 10_000 and gate.refusal() is None


@given(
    admit=st.integers(1, 1_000),
    steps=st.lists(st.tuples(st.integers(0, 50), st.integers(0, 3_000)), max_size=60),
)
def test_it_never_refuses_without_late_commits_in_a_row_nor_flaps_in_the_hold(admit, steps):
    """Against a model: closed iff CONFIRM late in a row happened and since then no
    observation at or under half the threshold came a hold after the last late one."""
    gate = FireLagGate(admit)
    now = in_row = 0
    refusing = False
    last_late = 0
    for step, lag in steps:
        now += step
        was = gate.refusing
        got = gate.observe(now, lag)
        if lag > admit:
            in_row, last_late = in_row + 1, now
            refusing = refusing or in_row >= CONFIRM
        else:
            in_row = 0
            if refusing and lag <= admit // 2 and now - last_late >= admit:
                refusing = False
        assert got == refusing == gate.refusing
        if was and not got:  # reopened: calm, and a hold after the last late commit
            assert lag <= admit // 2 and now - last_late >= admit


@pytest.mark.parametrize("value", [-1, 60_001, 1.5, "20", True])
def test_bad_settings_are_refused_naming_the_value(value):
    assert admit_fire_lag_problem(value) is not None
    with pytest.raises(SettingsError, match="admit_fire_lag_ms="):
        Settings(admit_fire_lag_ms=value)


def test_good_settings():
    assert Settings(admit_fire_lag_ms=0).admit_fire_lag_ms == 0
    assert Settings().admit_fire_lag_ms == 20
