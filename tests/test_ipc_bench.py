"""bench/ipc_bench.py runs against the processes' crossings as they are and reports every
figure: what a call, a SendBatch, fired rows and trace events cost to cross."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent


def test_ipc_bench_reports_the_cost_of_each_crossing():
    done = subprocess.run(
        [sys.executable, "-m", "bench.ipc_bench"], cwd=REPO, capture_output=True, text=True,
        timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    timed = [name for name in figures if name.endswith("_us") or "_us_per_" in name]
    assert "trace_delivery_us_per_message" in timed and "trace_engine_us_per_message" in timed
    assert len(timed) == 11 and all(figures[name] > 0 for name in timed), figures
    assert len(figures["load_average"]) == 3
