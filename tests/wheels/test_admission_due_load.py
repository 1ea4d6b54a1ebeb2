"""Admission by due load (timerwheel.wheels.admission): its parts, pure, in virtual time."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.admission import (
    BURST_SECONDS,
    HORIZON_S,
    MIN_SAMPLE_MESSAGES,
    SAMPLE_MS,
    Admission,
    CostModel,
    DueHorizon,
    DueLoadGate,
)
from timerwheel.wheels.domain import AdmissionRefused
from timerwheel.wheels.settings import Settings, SettingsError

T0 = 1_700_000_000_000


def test_the_horizon_counts_a_second_a_sustained_load_fills_and_drops_the_past():
    horizon = DueHorizon()
    # 100 timers a second over the next 20 s, in two commits
    times = [T0 + 3_000 + second * 1000 + i for second in range(20) for i in range(100)]
    horizon.add(times[:1000], T0)
    horizon.add(times[1000:], T0)
    assert horizon.due_per_s(T0) == 100
    assert horizon.due_per_s(T0 + 23_000) == 0  # every second past: fewer left than 8


def test_a_burst_in_a_few_seconds_is_not_a_sustained_load():
    horizon = DueHorizon()
    horizon.add([T0 + 10_000] * 1_000_000, T0)  # a midnight batch, one second
    horizon.add([T0 + 20_000 + s * 1000 for s in range(40)], T0)  # and one a second
    assert horizon.due_per_s(T0) == 1


def test_timers_beyond_the_horizon_are_not_counted():
    horizon = DueHorizon()
    far = T0 + (HORIZON_S + 1) * 1000
    horizon.add([far + s * 1000 for s in range(BURST_SECONDS) for _ in range(50)], T0)
    assert horizon.due_per_s(T0) == 0
    horizon.add([T0 + 5_000 + s * 1000 for s in range(BURST_SECONDS)] * 2, T0)
    assert horizon.due_per_s(T0) == 2


@given(
    send_us=st.integers(20, 2_000),
    fire_us=st.integers(20, 2_000),
    seed=st.integers(0, 1_000),
)
def test_the_cost_model_finds_both_costs_when_sends_and_fires_vary_apart(send_us, fire_us, seed):
    model = CostModel()
    sends, fires = 100 + seed % 50, 300
    for i in range(60):  # the mix of each sample moves
        sends, fires = (sends * 7 + 13 * i) % 900 + 50, (fires * 5 + 31 * i) % 900 + 50
        model.observe((sends * send_us + fires * fire_us) / 1e6, sends, fires)
    within = max(send_us, fire_us) / 1e6 / 20  # the ridge's pull, next to the larger
    assert model.send_s == pytest.approx(send_us / 1e6, abs=within)
    assert model.fire_s == pytest.approx(fire_us / 1e6, abs=within)


def test_the_cost_model_ignores_samples_of_few_messages():
    model = CostModel()
    model.observe(0.05, MIN_SAMPLE_MESSAGES // 2, 0)  # idle overhead, not a cost
    assert model.send_s is None and model.fire_s is None


def test_collinear_samples_give_the_pooled_cost_to_both():
    model = CostModel()
    for _ in range(20):
        model.observe(1000 * 300e-6, 500, 500)  # sends and fires always equal
    assert model.send_s + model.fire_s == pytest.approx(600e-6, rel=0.05)


def _run(gate: DueLoadGate, samples: int, *, sends: int, fires: int, due_per_s: int,
         send_us: int = 100, fire_us: int = 100, start_ms: int = 0) -> int:  # fmt: skip
    """`samples` samples of the same traffic; the CPU clock follows the costs."""
    now, cpu = start_ms, 0.0
    for _ in range(samples):
        now += SAMPLE_MS
        cpu += (sends * send_us + fires * fire_us) / 1e6
        gate.sample(now, cpu, sends, fires, due_per_s)
    return now


def test_it_refuses_when_the_fires_due_ahead_and_the_sends_exceed_the_budget():
    gate = DueLoadGate(85)
    gate.sample(0, 0.0, 0, 0, 0)
    # 5,000 sends/s, 3,000 fires/s, 100 µs each: 80% of a core, 3,000 due a second ahead
    now = _run(gate, 30, sends=500, fires=300, due_per_s=3_000)
    assert not gate.refusing and gate.load_pct == pytest.approx(80, abs=2)
    # the due load ahead grows to 5,000 a second: 50% + 50% > 85%
    _run(gate, 3, sends=500, fires=300, due_per_s=5_000, start_ms=now)
    assert gate.refusing
    refused = gate.refused()
    assert isinstance(refused, AdmissionRefused) and refused.retry_after_ms == SAMPLE_MS
    assert f"due_load_pct={gate.load_pct}" in str(refused) and "admit_due_load_pct=85" in str(
        refused
    )


def test_it_reopens_once_the_smoothed_send_rate_leaves_room():
    gate = DueLoadGate(85)
    gate.sample(0, 0.0, 0, 0, 0)
    now = _run(gate, 30, sends=500, fires=500, due_per_s=5_000)
    assert gate.refusing
    now = _run(gate, 1, sends=0, fires=500, due_per_s=5_000, start_ms=now)
    assert gate.refusing  # the rate is smoothed: one quiet sample is not room yet
    _run(gate, 20, sends=0, fires=500, due_per_s=5_000, start_ms=now)
    assert not gate.refusing and gate.load_pct <= 85 * 0.9


def test_sends_alone_never_close_it():
    gate = DueLoadGate(85)
    gate.sample(0, 0.0, 0, 0, 0)
    _run(gate, 30, sends=1_000, fires=0, due_per_s=0)  # a whole core of sends, none due
    assert gate.load_pct >= 100 and not gate.refusing


def test_budget_zero_never_refuses():
    gate = Admission(20, 0)
    gate.due.sample(0, 0.0, 0, 0, 0)
    _run(gate.due, 30, sends=500, fires=500, due_per_s=50_000)
    assert not gate.refusing and gate.refused() is None


def test_either_rule_refuses_and_the_fire_lag_refusal_is_named_first():
    gate = Admission(20, 85)
    gate.due.sample(0, 0.0, 0, 0, 0)
    _run(gate.due, 10, sends=500, fires=500, due_per_s=5_000)
    assert gate.refusing and "due_load_pct" in gate.refusal()
    gate.observe(1_000, 500)
    gate.observe(1_001, 500)
    assert "fire_lag_ms=500" in gate.refusal()


@pytest.mark.parametrize("value", [-1, 1_001, "85", 85.0, None])
def test_a_bad_budget_is_refused_with_its_value(value, tmp_path):
    with pytest.raises(SettingsError, match=f"admit_due_load_pct={value!r}"):
        Settings(data_dir=str(tmp_path), admit_due_load_pct=value)


def test_the_budget_shrinks_to_what_a_saturated_process_gets_and_recovers():
    gate = DueLoadGate(85)
    gate.sample(0, 0.0, 0, 0, 0)
    now, cpu = 0, 0.0
    for _ in range(30):  # fires late while the process gets half a core: a neighbour
        now += SAMPLE_MS
        cpu += 0.05
        gate.sample(now, cpu, 300, 200, 2_000, saturated=True)
    assert gate.capacity == pytest.approx(0.5, abs=0.02)
    # 3,000 sends/s and 2,000 due a second at 100 µs: half a core, all the process gets
    assert gate.refusing and gate.load_pct >= 95
    for _ in range(40):  # on time again, using a tenth of a core: back toward one core
        now += SAMPLE_MS
        cpu += 0.01
        gate.sample(now, cpu, 0, 0, 0)
    assert gate.capacity == pytest.approx(0.7, abs=0.02)  # 0.05 a second, for 4 s
    assert not gate.refusing
