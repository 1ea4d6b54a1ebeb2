"""bench/engine_bench.py `steady`, run small: the shape it claims (a SendBatch every 20 ms,
one fire commit a fire tick, an ack every 10 ms, each its own group commit) and that
every message sent in the window is acked in it once the fires have caught up, with the
retention sweep running beside them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent


def test_steady_runs_tdmqs_shape_and_acks_at_the_send_rate():
    args = [
        sys.executable, "-m", "bench.engine_bench", "steady", "--rate", "500",
        "--min-delay-s", "1", "--max-delay-s", "2", "--warmup-s", "3", "--measure-s", "4",
        "--retention-s", "2", "--no-sync",
    ]  # fmt: skip
    done = subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["bench"] == "steady" and figures["fire_tick_ms"] == 4
    assert figures["retention_ms"] == 2_000  # shorter than the warm-up: sweeping measured
    # 250 fire commits (one a 4 ms tick) + 50 SendBatches + 100 acks a second, give or
    # take one at the window's edges
    assert abs(figures["group_commits_per_s"] - 400) <= 2
    # after the warm-up the fires run at the send rate: the window acks what it sends
    assert abs(figures["messages_acked"] - 500 * 4) <= 100
    assert figures["cpu_us_per_message"] > 0 and figures["cpu_percent_of_a_core"] > 0
