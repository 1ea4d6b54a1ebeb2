"""Child of tests/capacity/test_capacity_scale.py: the report's Spark part and outputs over
synthetic rows with timers in N distinct seconds, in a process of its own so that its driver
memory (`spark.driver.memory`) is small and its peak RSS is its own.

    python tests/helpers/capacity_memory_child.py OUT_DIR N1 N2 ...

For each N in turn: N pending timers, one per second, through timerwheel.capacity.report's
summarise_rows, build_tables and write_outputs (the data source is left out: it is
tested elsewhere, and decoding N records in Python would only make this slow). Prints
one JSON line per N: the peak RSS of this (the driver's Python) process so far, in MiB,
and the row count of the per-minute table Spark wrote.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time

from pyspark.sql import functions as F

from timerwheel.capacity.report import build_tables, summarise_rows, write_outputs
from timerwheel.capacity.spark import build_session
from timerwheel.capacity.tables import ReportOptions

T0_MS = 1_700_000_000_000


def synthetic_rows(spark, timers: int):
    """`timers` SCHEDULED timers, one in each of `timers` consecutive seconds."""
    return spark.range(timers).select(
        F.format_string("id-%d", "id").alias("message_id"),
        F.concat(F.lit("topic-"), (F.col("id") % 7).cast("string")).alias("topic"),
        (F.lit(T0_MS) + F.col("id") * 1_000).alias("deliver_at_ms"),
        F.lit(T0_MS - 60_000).alias("created_at_ms"),
        F.lit(10).cast("bigint").alias("body_bytes"),
        F.lit("SCHEDULED").alias("state"),
        F.lit("hour").alias("wheel"),
    )


def main() -> int:
    out_base, sizes = sys.argv[1], [int(n) for n in sys.argv[2:]]
    spark = build_session(
        "local[2]", conf={"spark.driver.memory": "512m", "spark.sql.shuffle.partitions": "4"}
    )
    try:
        for timers in sizes:
            out_dir = os.path.join(out_base, f"report-{timers}")
            grouped, seconds = summarise_rows(
                synthetic_rows(spark, timers), out_dir, ReportOptions()
            )
            manifest = {
                "cut_at_ms": T0_MS,
                "totals": {"bytes": timers * 100, "families": {"messages": {"bytes": timers * 80}}},
            }
            result = build_tables(grouped, seconds, manifest, ReportOptions())
            write_outputs(result, out_dir, time.monotonic())
            peak_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(
                json.dumps(
                    {
                        "timers": timers,
                        "peak_rss_mib": round(peak_mib, 1),
                        "minutes": seconds.rows["due_per_minute"],
                        "pending": result.summary["pending_timers"],
                    }
                ),
                flush=True,
            )
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
