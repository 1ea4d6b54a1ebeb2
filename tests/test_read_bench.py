"""bench/read_bench.py reads real RocksDB both ways and reports every case."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(120)
REPO = Path(__file__).resolve().parent.parent
CASES = (
    "sst_10000", "sst_1000", "sst_100", "sst_20", "sst_3000_third_unwanted",
    "sst_300_third_unwanted", "memtable_10000",
)  # fmt: skip


def test_read_bench_reports_both_ways_for_every_case():
    done = subprocess.run(
        [sys.executable, "-m", "bench.read_bench", "--records", "3000"], cwd=REPO,
        capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout.strip().splitlines()[-1])
    assert figures["records"] == 3000
    for case in CASES:
        assert figures[case]["multi_get_us"] > 0 and figures[case]["range_read_us"] > 0, case
    assert len(figures["load_average"]) == 3
