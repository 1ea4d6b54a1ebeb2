"""Offered twice what one process sustains, in virtual time (tests/wheels/overload_sim.py):
fire lateness under the fire-lag rule alone and with admission by due load.

The fire-lag rule admits whenever the fires are on time, so the due load it stores
climbs until the fires alone take most of the core; then a neighbour taking part of the
core (another process, a compaction) makes every fire late for as long as it stays,
and refusing sends cannot help: those timers are stored. Admission by due load keeps
fires and sends within the budget, so the fires keep headroom for the same neighbour.
"""

from __future__ import annotations

import pytest

from tests.wheels.overload_sim import simulate
from timerwheel.wheels.admission import Admission

CAPACITY = {"send_us": 150, "fire_us": 350}  # 2,000 timers/s through the process


@pytest.mark.parametrize(
    ("stolen_ms", "every_ms"),
    [(2_000, 10_000), (6_000, 20_000)],  # a neighbour takes 35% of the core, 2 s or 6 s
)
def test_due_load_admission_bounds_fire_lateness_where_the_lag_rule_does_not(stolen_ms, every_ms):
    runs = {}
    for name, budget_pct in (("lag", 0), ("due", 85)):
        runs[name] = simulate(
            Admission(20, budget_pct),
            **CAPACITY,
            offered_per_s=4_000,  # twice the capacity
            seconds=60,
            refuse_us=25,
            window=25,
            stolen_pct=35,
            stolen_ms=stolen_ms,
            stolen_every_ms=every_ms,
        )
    lag, due = runs["lag"], runs["due"]
    for outcome in (lag, due):
        assert outcome.fired == outcome.stored > 60 * 1_500  # nothing lost, most stored
        assert outcome.refused > 0  # the excess met refusals at the producers
    # the lag rule's tail grows with the neighbour's stay (a stay's worth of late fires)
    assert lag.quantile_ms(0.999) > stolen_ms / 10
    # due load: the same neighbour, the fires within 100 ms whatever its stay
    assert due.quantile_ms(0.999) <= 100
    assert due.quantile_ms(0.5) <= 5


def test_without_a_neighbour_both_keep_the_fires_on_time():
    for budget_pct in (0, 85):
        outcome = simulate(
            Admission(20, budget_pct), **CAPACITY, offered_per_s=4_000, refuse_us=25, window=25
        )
        assert outcome.fired == outcome.stored
        assert outcome.quantile_ms(0.999) <= 60
