"""The report's driver does not hold the per-second data: its memory is flat in the number
of distinct seconds.

One child process (tests/helpers/capacity_memory_child.py, spark.driver.memory=512m) makes
the report's Spark part and outputs for 20,000 and then 2,000,000 distinct seconds of
pending timers. Had the per-second rows gone to the driver (as Arrow, ~200 B a row with
every grouping column), the second run would add hundreds of MiB to the driver's peak RSS
(or run the 512 MiB JVM out of heap); the per-minute table Spark wrote must still be
complete.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.system  # Spark in a child process

CHILD = os.path.join(
    os.path.dirname(os.path.dirname(__file__)), "helpers", "capacity_memory_child.py"
)
SMALL, LARGE = 20_000, 2_000_000
GROWTH_LIMIT_MIB = 64  # 2M rows of the old per-second result alone were ~300 MiB


@pytest.mark.timeout(600)
def test_driver_memory_is_flat_in_the_number_of_distinct_seconds(tmp_path):
    done = subprocess.run(
        [sys.executable, CHILD, str(tmp_path), str(SMALL), str(LARGE)],
        capture_output=True, text=True, timeout=540, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    small, large = (json.loads(line) for line in done.stdout.splitlines() if line.startswith("{"))
    assert (small["pending"], large["pending"]) == (SMALL, LARGE)
    assert large["minutes"] == -(-LARGE // 60)  # every minute of the 2M seconds was written
    growth = large["peak_rss_mib"] - small["peak_rss_mib"]
    assert growth < GROWTH_LIMIT_MIB, (small, large)
