"""bench/read_bench.py reads real RocksDB both ways and reports every case."""

from __future__ import annotations

import pytest
from helpers.bench_runs import bench_figures

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: a spawned `python -m bench.*`
CASES = (
    "sst_10000", "sst_1000", "sst_100", "sst_20", "sst_3000_third_unwanted",
    "sst_300_third_unwanted", "memtable_10000",
)  # fmt: skip


def test_read_bench_reports_both_ways_for_every_case():
    figures = bench_figures("read_bench", "--records", "3000")
    assert figures["records"] == 3000
    for case in CASES:
        assert figures[case]["multi_get_us"] > 0 and figures[case]["range_read_us"] > 0, case
    assert len(figures["load_average"]) == 3
