"""The capacity report's numbers: Spark aggregations over the ``timerwheel_sst`` rows.

Everything about *when* load arrives is computed over the pending (SCHEDULED) timers:
they are the future work. Per-topic and per-state tables also count the records kept
for retention (FIRED, ACKED, CANCELLED), because those hold storage too.

The rows are read once and cached; every table is a small aggregate collected to the
driver as an Arrow table. Times are epoch milliseconds; `*_utc` columns are for people.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
from pyspark import StorageLevel
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from capacity.datasource import SOURCE_NAME
from store import keys

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

# Delay (deliver - created) histogram: (label, lower bound ms); each bucket ends at the next.
DELAY_BUCKETS: tuple[tuple[str, int], ...] = (
    ("< 1 s", 0), ("1-10 s", SECOND_MS), ("10-60 s", 10 * SECOND_MS),
    ("1-10 min", MINUTE_MS), ("10-60 min", 10 * MINUTE_MS), ("1-6 h", HOUR_MS),
    ("6-24 h", 6 * HOUR_MS), ("1-7 d", DAY_MS), ("7-30 d", 7 * DAY_MS), (">= 30 d", 30 * DAY_MS),
)  # fmt: skip
DELAY_QUANTILES = (0.5, 0.9, 0.99)


@dataclass(frozen=True)
class ReportOptions:
    drain_rate: int = 10_000  # timers the service can fire per second
    top_seconds: int = 20
    projection_days: tuple[int, ...] = (1, 7, 30, 90)

    def __post_init__(self) -> None:
        if self.drain_rate <= 0:
            raise ValueError(f"drain_rate={self.drain_rate}: must be a positive timers/second")
        if self.top_seconds <= 0:
            raise ValueError(f"top_seconds={self.top_seconds}: must be positive")


@dataclass
class ReportTables:
    tables: dict[str, pa.Table] = field(default_factory=dict)
    summary: dict = field(default_factory=dict)


def compute(
    spark: SparkSession, export_dir: str, manifest: dict, options: ReportOptions
) -> ReportTables:
    """Every table of the report. The export's files must already be verified."""
    rows = (
        spark.read.format(SOURCE_NAME)
        .option("verify", "size")
        .load(export_dir)
        .select("topic", "deliver_at_ms", "created_at_ms", "body_bytes", "state", "wheel")
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        return _compute(rows, manifest, options)
    finally:
        rows.unpersist()


def _compute(rows: DataFrame, manifest: dict, options: ReportOptions) -> ReportTables:
    out = ReportTables()
    pending = rows.filter(F.col("state") == "SCHEDULED")
    per_second = (
        pending.groupBy(_floor("deliver_at_ms", SECOND_MS).alias("second_start_ms"))
        .agg(F.count("*").alias("timers"), F.sum("body_bytes").alias("body_bytes"))
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        for name, unit_ms in (("due_per_minute", MINUTE_MS), ("due_per_hour", HOUR_MS)):
            out.tables[name] = _due_per(per_second, unit_ms, name.rsplit("_", 1)[1])
        out.tables["peak_seconds"] = _peak_seconds(per_second, options)
        late = per_second.filter(F.col("timers") > options.drain_rate).agg(
            F.count("*").alias("seconds"), F.sum("timers").alias("timers")
        )
        late_row = late.collect()[0]
    finally:
        per_second.unpersist()
    out.tables["topics"] = _topics(rows)
    out.tables["delay_distribution"], delay_stats = _delays(pending)
    out.tables["wheel_occupancy"] = _wheels(pending)
    out.tables["states"] = _arrow(
        rows.groupBy("state")
        .agg(F.count("*").alias("records"), F.sum("body_bytes").alias("body_bytes"))
        .orderBy("state")
    )
    window = rows.agg(
        F.count("*").alias("records"),
        F.min("created_at_ms").alias("first_created_ms"),
        F.max("created_at_ms").alias("last_created_ms"),
    ).collect()[0]
    out.tables["storage_projection"], storage = _projection(window, manifest, options)
    out.summary = {
        "drain_rate": options.drain_rate,
        "seconds_over_drain_rate": late_row["seconds"],
        "timers_in_late_seconds": late_row["timers"] or 0,
        **_pending_summary(out.tables),
        **delay_stats,
        **storage,
    }
    return out


def _floor(column: str, unit_ms: int) -> Column:
    return F.col(column) - F.col(column) % unit_ms


def _utc(column: str, pattern: str) -> Column:
    return F.date_format(F.timestamp_millis(F.col(column)), pattern)


def _due_per(per_second: DataFrame, unit_ms: int, unit: str) -> pa.Table:
    start = f"{unit}_start_ms"
    pattern = "yyyy-MM-dd HH:mm" if unit_ms < HOUR_MS else "yyyy-MM-dd HH:00"
    return _arrow(
        per_second.groupBy(_floor("second_start_ms", unit_ms).alias(start))
        .agg(
            F.sum("timers").alias("timers"),
            F.sum("body_bytes").alias("body_bytes"),
            F.max("timers").alias("peak_second_timers"),
        )
        .withColumn(f"{unit}_utc", _utc(start, pattern))
        .orderBy(start)
    )


def _peak_seconds(per_second: DataFrame, options: ReportOptions) -> pa.Table:
    """The busiest seconds; one whose timers exceed the drain rate fires partly late."""
    rate = options.drain_rate
    drain_ms = F.ceil(F.col("timers") * 1000 / rate).cast("long")
    return _arrow(
        per_second.orderBy(F.desc("timers"), F.asc("second_start_ms"))
        .limit(options.top_seconds)
        .withColumn("second_utc", _utc("second_start_ms", "yyyy-MM-dd HH:mm:ss"))
        .withColumn("drain_ms", drain_ms)
        .withColumn("late", F.col("timers") > rate)
        # The last timer of the second fires this long after the second ends.
        .withColumn("max_late_ms", F.greatest(F.lit(0).cast("long"), drain_ms - SECOND_MS))
    )


def _topics(rows: DataFrame) -> pa.Table:
    scheduled = F.col("state") == "SCHEDULED"
    return _arrow(
        rows.groupBy("topic")
        .agg(
            F.count(F.when(scheduled, 1)).alias("timers"),
            F.coalesce(F.sum(F.when(scheduled, F.col("body_bytes"))), F.lit(0)).alias("body_bytes"),
            F.count("*").alias("records"),
            F.sum("body_bytes").alias("record_body_bytes"),
            F.min(F.when(scheduled, F.col("deliver_at_ms"))).alias("first_deliver_ms"),
            F.max(F.when(scheduled, F.col("deliver_at_ms"))).alias("last_deliver_ms"),
        )
        .orderBy(F.desc("timers"), F.desc("records"), "topic")
    )


def _delays(pending: DataFrame) -> tuple[pa.Table, dict]:
    delay = F.col("deliver_at_ms") - F.col("created_at_ms")
    bucket = F.lit(0)
    for index, (_, lower_ms) in enumerate(DELAY_BUCKETS[1:], start=1):
        bucket = F.when(delay >= lower_ms, index).otherwise(bucket)
    counts = {
        row["bucket"]: (row["timers"], row["body_bytes"])
        for row in pending.groupBy(bucket.alias("bucket"))
        .agg(F.count("*").alias("timers"), F.sum("body_bytes").alias("body_bytes"))
        .collect()
    }
    uppers = [lower for _, lower in DELAY_BUCKETS[1:]] + [None]
    table = pa.table(
        {
            "bucket": [label for label, _ in DELAY_BUCKETS],
            "lower_ms": [lower for _, lower in DELAY_BUCKETS],
            "upper_ms": pa.array(uppers, pa.int64()),
            "timers": [counts.get(i, (0, 0))[0] for i in range(len(DELAY_BUCKETS))],
            "body_bytes": [counts.get(i, (0, 0))[1] or 0 for i in range(len(DELAY_BUCKETS))],
        }
    )
    stats = pending.agg(
        F.min(delay).alias("min"),
        F.max(delay).alias("max"),
        F.avg(delay).alias("avg"),
        F.percentile_approx(delay, list(DELAY_QUANTILES), 10_000).alias("quantiles"),
    ).collect()[0]
    quantiles = stats["quantiles"] or [None] * len(DELAY_QUANTILES)
    summary = {
        "delay_min_ms": stats["min"],
        "delay_max_ms": stats["max"],
        "delay_avg_ms": None if stats["avg"] is None else round(stats["avg"]),
        **{
            f"delay_p{round(q * 100)}_ms": v
            for q, v in zip(DELAY_QUANTILES, quantiles, strict=True)
        },
    }
    return table, summary


def _wheels(pending: DataFrame) -> pa.Table:
    """Scheduled timers per wheel; '(none)' would mean a timer no wheel holds (a bug)."""
    return _arrow(
        pending.groupBy(F.coalesce(F.col("wheel"), F.lit("(none)")).alias("wheel"))
        .agg(
            F.count("*").alias("timers"),
            F.sum("body_bytes").alias("body_bytes"),
            F.min("deliver_at_ms").alias("first_deliver_ms"),
            F.max("deliver_at_ms").alias("last_deliver_ms"),
        )
        .orderBy("first_deliver_ms")
    )


def _projection(window, manifest: dict, options: ReportOptions) -> tuple[pa.Table, dict]:
    """Storage per timer from the SST bytes, and gross growth at the observed send rate.

    Gross: it assumes nothing fires or is retired, so it is an upper bound; the storage
    that the retained records hold is in the `states` table.
    """
    records = window["records"]
    sst_bytes = manifest["totals"]["bytes"]
    bytes_per_timer = sst_bytes / records if records else 0.0
    span_ms = (window["last_created_ms"] or 0) - (window["first_created_ms"] or 0)
    rate = records * 1000 / span_ms if span_ms > 0 else 0.0
    days = list(options.projection_days)
    new_timers = [round(rate * d * DAY_MS / SECOND_MS) for d in days]
    table = pa.table(
        {
            "days_ahead": days,
            "new_timers": new_timers,
            "new_bytes": [round(n * bytes_per_timer) for n in new_timers],
            "total_bytes": [sst_bytes + round(n * bytes_per_timer) for n in new_timers],
        }
    )
    storage = {
        "records": records,
        "sst_bytes": sst_bytes,
        "messages_sst_bytes": manifest["totals"]["families"][keys.CF_MESSAGES]["bytes"],
        "bytes_per_timer": round(bytes_per_timer, 1),
        "first_created_ms": window["first_created_ms"],
        "last_created_ms": window["last_created_ms"],
        "send_rate_per_second": round(rate, 3),
    }
    return table, storage


def _pending_summary(tables: dict[str, pa.Table]) -> dict:
    hours = tables["due_per_hour"]
    peaks = tables["peak_seconds"]
    pending = sum(hours.column("timers").to_pylist())
    first = hours.column("hour_start_ms")[0].as_py() if hours.num_rows else None
    last = hours.column("hour_start_ms")[-1].as_py() if hours.num_rows else None
    return {
        "pending_timers": pending,
        "pending_body_bytes": sum(hours.column("body_bytes").to_pylist()),
        "first_due_hour_ms": first,
        "last_due_hour_ms": last,
        "peak_second_ms": peaks.column("second_start_ms")[0].as_py() if peaks.num_rows else None,
        "peak_second_timers": peaks.column("timers")[0].as_py() if peaks.num_rows else 0,
    }


def _arrow(frame: DataFrame) -> pa.Table:
    return frame.toArrow()
