"""Everything derived from the per-second counts, computed by Spark and written by Spark.

The one pass (timerwheel.capacity.job) leaves one row per distinct second that has pending timers,
on disk as Parquet. That can be as many rows as there are timers (a year with timers in
every second is 31M rows), so none of it goes to the driver as such: Spark rolls the
seconds up per minute and per hour and writes those tables (one file each, moved to
``tables/NAME.parquet`` / ``.csv``), picks the top seconds, counts the late ones and
sums the totals. The driver only receives results whose size does not grow with the data:
the top-N seconds, a few totals, the charts' series (the per-minute and per-hour counts of
a fixed 48-hour window, and one row per day of the whole horizon) and the first rows of
each table for the page.
"""

from __future__ import annotations

import glob
import os
import shutil
from dataclasses import dataclass, field

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS
ZOOM_MS = 48 * HOUR_MS  # the charts' close-up: 48 hours from the first due timer
HEAD_ROWS = 25  # rows of a large table shown on the page

# (table, unit ms, UTC text pattern (Spark's datetime pattern))
ROLLUPS = (
    ("due_per_minute", MINUTE_MS, "yyyy-MM-dd HH:mm"),
    ("due_per_hour", HOUR_MS, "yyyy-MM-dd HH:00"),
)


@dataclass(frozen=True)
class SecondsResult:
    """What the driver gets back: all of it bounded, whatever the number of seconds."""

    totals: dict  # pending_timers, pending_body_bytes, first/last_due_second_ms
    peaks: pa.Table  # the top seconds: second_start_ms, timers, body_bytes
    late_seconds: int  # seconds holding more timers than the drain rate
    timers_in_late_seconds: int
    heads: dict[str, pa.Table]  # first HEAD_ROWS rows of each written table
    rows: dict[str, int]  # rows of each written table
    zoom_start_ms: int | None  # the close-up window [start, start + ZOOM_MS)
    zoom: dict[str, pa.Table]  # due_per_minute / due_per_hour rows inside the window
    per_day: pa.Table  # day_start_ms, timers: the whole horizon
    fire_rates: dict = field(default_factory=dict)  # timerwheel.capacity.job.fire_rates


def summarise(
    seconds: DataFrame, tables_dir: str, *, drain_rate: int, top_seconds: int
) -> SecondsResult:
    """`seconds` has one row per pending second (second_start_ms, timers, body_bytes)."""
    totals = _totals(seconds)
    zoom_start = None
    if totals["first_due_second_ms"] is not None:
        zoom_start = totals["first_due_second_ms"] // HOUR_MS * HOUR_MS
    heads, rows, zoom = {}, {}, {}
    for name, unit_ms, pattern in ROLLUPS:
        table = _rollup(seconds, unit_ms, name.rsplit("_", 1)[1], pattern)
        rows[name] = _write(table, tables_dir, name)
        written = table.sparkSession.read.parquet(os.path.join(tables_dir, f"{name}.parquet"))
        heads[name] = written.limit(HEAD_ROWS).toArrow()
        start = written.columns[1]  # <unit>_start_ms
        if zoom_start is None:
            zoom[name] = heads[name].slice(0, 0)
        else:
            window = (F.col(start) >= zoom_start) & (F.col(start) < zoom_start + ZOOM_MS)
            zoom[name] = written.filter(window).orderBy(start).toArrow()
    top = seconds.orderBy(F.desc("timers"), F.asc("second_start_ms")).limit(top_seconds)
    late = seconds.filter(F.col("timers") > drain_rate).agg(
        F.count(F.lit(1)).alias("seconds"), F.sum("timers").alias("timers")
    )
    late_row = late.collect()[0]
    day = (F.col("second_start_ms") - F.col("second_start_ms") % DAY_MS).alias("day_start_ms")
    per_day = seconds.groupBy(day).agg(F.sum("timers").alias("timers")).orderBy("day_start_ms")
    return SecondsResult(
        totals=totals,
        peaks=top.toArrow(),
        late_seconds=late_row["seconds"],
        timers_in_late_seconds=late_row["timers"] or 0,
        heads=heads,
        rows=rows,
        zoom_start_ms=zoom_start,
        zoom=zoom,
        per_day=per_day.toArrow(),
    )


def _totals(seconds: DataFrame) -> dict:
    row = seconds.agg(
        F.sum("timers").alias("timers"),
        F.sum("body_bytes").alias("body_bytes"),
        F.min("second_start_ms").alias("first"),
        F.max("second_start_ms").alias("last"),
    ).collect()[0]
    return {
        "pending_timers": row["timers"] or 0,
        "pending_body_bytes": row["body_bytes"] or 0,
        "first_due_second_ms": row["first"],
        "last_due_second_ms": row["last"],
    }


def _rollup(seconds: DataFrame, unit_ms: int, unit: str, pattern: str) -> DataFrame:
    """Timers and body bytes per `unit`, with its busiest second; the UTC text first."""
    start = f"{unit}_start_ms"
    floored = F.col("second_start_ms") - F.col("second_start_ms") % unit_ms
    rolled = seconds.groupBy(floored.alias(start)).agg(
        F.sum("timers").alias("timers"),
        F.sum("body_bytes").alias("body_bytes"),
        F.max("timers").alias("peak_second_timers"),
    )
    utc = F.date_format(F.timestamp_millis(F.col(start)), pattern).alias(f"{unit}_utc")
    return rolled.select(utc, start, "timers", "body_bytes", "peak_second_timers")


def _write(table: DataFrame, tables_dir: str, name: str) -> int:
    """Write `table` sorted by time as ONE Parquet and ONE CSV file (Spark writes them;
    a single task streams the sorted rows, so no process holds the table); its row count."""
    start = table.columns[1]
    ordered = table.orderBy(start).coalesce(1)
    staging = os.path.join(tables_dir, f"spark-{name}")
    ordered.write.mode("overwrite").parquet(os.path.join(staging, "parquet"))
    written = table.sparkSession.read.parquet(os.path.join(staging, "parquet"))
    written.coalesce(1).write.mode("overwrite").option("header", True).csv(
        os.path.join(staging, "csv")
    )
    rows = written.count()
    for kind in ("parquet", "csv"):
        parts = glob.glob(os.path.join(staging, kind, f"part-*.{kind}"))
        target = os.path.join(tables_dir, f"{name}.{kind}")
        if parts:
            (part,) = parts  # coalesce(1): one task, one file
            os.replace(part, target)
        else:  # Spark writes no CSV part for no rows: a header alone says the same
            with open(target, "w", encoding="utf-8") as out:
                out.write(",".join(f'"{c}"' for c in table.columns) + "\n")
    shutil.rmtree(staging)
    return rows
