"""bench/ipc_bench.py runs against the processes' crossings as they are and reports every
figure: what a call, a SendBatch, fired rows and trace events cost to cross."""

from __future__ import annotations

import pytest
from helpers.bench_runs import bench_figures

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: a spawned `python -m bench.*`


def test_ipc_bench_reports_the_cost_of_each_crossing():
    figures = bench_figures("ipc_bench")
    timed = [name for name in figures if name.endswith("_us") or "_us_per_" in name]
    assert "trace_delivery_us_per_message" in timed and "trace_engine_us_per_message" in timed
    assert len(timed) == 11 and all(figures[name] > 0 for name in timed), figures
    assert len(figures["load_average"]) == 3
