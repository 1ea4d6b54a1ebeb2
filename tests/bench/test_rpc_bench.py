"""bench/rpc_bench.py runs against the RPC layer as it is and reports every figure."""

from __future__ import annotations

import pytest
from helpers.bench_runs import bench_figures

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: a spawned `python -m bench.*`
FIGURES = (
    "send_batch_to_specs_us", "prepare_sends_us", "send_batch_response_us",
    "ack_ids_checked_us", "delivery_batch_serialised_us",
)  # fmt: skip


def test_rpc_bench_reports_the_cost_of_each_step_a_message():
    figures = bench_figures("rpc_bench")
    assert all(figures[name] > 0 for name in FIGURES), figures
    assert len(figures["load_average"]) == 3
