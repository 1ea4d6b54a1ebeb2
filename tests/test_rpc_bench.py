"""bench/rpc_bench.py runs against the RPC layer as it is and reports every figure."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent
FIGURES = (
    "send_batch_to_specs_us", "prepare_sends_us", "send_batch_response_us",
    "ack_ids_checked_us", "delivery_batch_serialised_us",
)  # fmt: skip


def test_rpc_bench_reports_the_cost_of_each_step_a_message():
    done = subprocess.run(
        [sys.executable, "-m", "bench.rpc_bench"], cwd=REPO, capture_output=True, text=True,
        timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert all(figures[name] > 0 for name in FIGURES), figures
    assert len(figures["load_average"]) == 3
