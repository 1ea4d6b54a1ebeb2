"""The Spark part of the capacity report: ONE pass over the rows, many groupings at once.

Reading the SST files is the expensive part (Python decodes every record), so the rows
are read exactly once: a single ``GROUP BY GROUPING SETS`` aggregates them by
(state, second), (state, topic), (state, wheel), (state, delay bucket), (state, fine
delay bin), (state, fired second) and (state) in one job, written by Spark as Parquet.
The per-second rows can be as many as the timers, so they stay on disk for
timerwheel.capacity.seconds (Spark again), and so do the fired seconds, which `fire_rates`
sums up there; the other groupings are bounded (topics, wheels, delay bins, states) and go
to the driver as one Arrow table, from which timerwheel.capacity.tables derives the rest.

The drain rate is measured where the export shows it: the records kept after they fired
(FIRED, ACKED, for the retention) carry their fire time, and in a second in which the
service fired a timer `BEHIND_MS` or more after its deliver time, it had a backlog and
fired as fast as it could. The most timers fired in one such second is the measured drain
rate (`fire_rates`); an export with no such second has none.

Delays are deliver_at_ms - created_at_ms. Besides the coarse histogram buckets, each
pending timer's delay falls in a fine logarithmic bin (2 % wide) from which the delay
percentiles are read, so they are within 2 % of the exact value.
"""

from __future__ import annotations

import math
import uuid
from dataclasses import dataclass

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from timerwheel.capacity.datasource import SOURCE_NAME, filesystem_option

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
DELAY_BIN_GROWTH = 1.02  # fine bins: bin b holds delays in [g^b - 1, g^(b+1) - 1)

# The groupings of the one pass, by the name timerwheel.capacity.tables uses for each.
GROUPINGS: dict[str, str] = {
    "second": "second_start_ms",
    "topic": "topic",
    "wheel": "wheel",
    "delay_bucket": "delay_bucket",
    "delay_bin": "delay_bin",
    "fired_second": "fired_second_ms",
}
UNBOUNDED = ("second", "fired_second")  # groupings that stay on disk (Spark reads them)
BEHIND_MS = SECOND_MS  # a timer fired this late: the service had a backlog


@dataclass(frozen=True)
class Aggregated:
    """The one pass's result: the bounded groupings on the driver, the seconds on disk."""

    grouped: pa.Table  # every grouping but the seconds: topics, wheels, delays, states
    seconds: DataFrame  # pending seconds: second_start_ms, timers, body_bytes (Parquet)
    fired_seconds: DataFrame  # fired_second_ms, fired, max_fire_late_ms (Parquet)


def read_rows(spark: SparkSession, export_dir: str, filesystem=None) -> DataFrame:
    """The export's rows through the ``timerwheel_sst`` data source; `export_dir` is a
    local dir or a URI, or a path on `filesystem` (a pyarrow filesystem) when given."""
    reader = spark.read.format(SOURCE_NAME).option("verify", "size")
    if filesystem is not None:
        reader = reader.option("filesystem", filesystem_option(filesystem))
    return reader.load(export_dir)


def aggregate(rows: DataFrame, work_dir: str) -> Aggregated:
    """One Spark job over `rows`, written by Spark as Parquet under `work_dir` (which the
    executors must be able to write, like the report's out dir); then only the groupings
    whose size does not grow with the data are brought to the driver."""
    spark = rows.sparkSession
    view = f"timerwheel_rows_{uuid.uuid4().hex}"
    _with_derived_columns(rows).createOrReplaceTempView(view)
    try:
        spark.sql(_grouping_sets_sql(view)).write.mode("overwrite").parquet(work_dir)
    finally:
        spark.catalog.dropTempView(view)
    written = spark.read.parquet(work_dir)
    seconds = written.filter((F.col("kind") == "second") & (F.col("state") == "SCHEDULED"))
    fired = written.filter(
        (F.col("kind") == "fired_second") & F.col("fired_second_ms").isNotNull()
    ).groupBy("fired_second_ms")
    return Aggregated(
        grouped=written.filter(~F.col("kind").isin(*UNBOUNDED)).toArrow(),
        seconds=seconds.select("second_start_ms", "timers", "body_bytes"),
        fired_seconds=fired.agg(
            F.sum("timers").alias("fired"), F.max("max_fire_late_ms").alias("max_fire_late_ms")
        ),
    )


def fire_rates(fired_seconds: DataFrame) -> dict:
    """What the export's fired records say of the drain rate, computed by Spark: the
    seconds in which the service fired a timer `BEHIND_MS` or more late (it had a
    backlog), the most fired in one of those (the measured drain rate; None without one)
    and in any second."""
    behind = F.col("max_fire_late_ms") >= BEHIND_MS
    row = fired_seconds.agg(
        F.count(F.when(behind, 1)).alias("behind_seconds"),
        F.max(F.when(behind, F.col("fired"))).alias("behind_max"),
        F.max("fired").alias("most"),
        F.count(F.lit(1)).alias("fired_seconds"),
    ).collect()[0]
    return {
        "behind_seconds": row["behind_seconds"] or 0,
        "measured_drain_rate": row["behind_max"],
        "most_fired_in_a_second": row["most"] or 0,
        "fired_seconds": row["fired_seconds"] or 0,
    }


def delay_bin_upper_ms(delay_bin: int) -> int:
    """The largest delay (ms) in fine bin `delay_bin`."""
    return math.ceil(DELAY_BIN_GROWTH ** (delay_bin + 1) - 1)


def _with_derived_columns(rows: DataFrame) -> DataFrame:
    delay = F.col("deliver_at_ms") - F.col("created_at_ms")
    pending = F.col("state") == "SCHEDULED"
    clamped = F.greatest(delay, F.lit(0))
    fine_bin = F.floor(F.log(clamped + 1) / math.log(DELAY_BIN_GROWTH)).cast("int")
    # Rows without fire times (made by hand, or read before the column) fired nothing.
    fired_at = F.col("fired_at_ms") if "fired_at_ms" in rows.columns else F.lit(None)
    fired_at = fired_at.cast("bigint")
    return rows.select(
        "state", "topic", "wheel", "body_bytes", "deliver_at_ms", "created_at_ms",
        delay.alias("delay_ms"),
        (fired_at - fired_at % SECOND_MS).alias("fired_second_ms"),
        (fired_at - F.col("deliver_at_ms")).alias("fire_late_ms"),
        F.when(pending, F.col("deliver_at_ms") - F.col("deliver_at_ms") % SECOND_MS).alias(
            "second_start_ms"
        ),
        F.when(pending, _delay_bucket(delay)).alias("delay_bucket"),
        F.when(pending, fine_bin).alias("delay_bin"),
    )  # fmt: skip


def _delay_bucket(delay: Column) -> Column:
    bucket = F.lit(0)
    for index, (_, lower_ms) in enumerate(DELAY_BUCKETS[1:], start=1):
        bucket = F.when(delay >= lower_ms, index).otherwise(bucket)
    return bucket


def _grouping_sets_sql(view: str) -> str:
    columns = list(GROUPINGS.values())
    kind = " ".join(
        f"WHEN grouping({column}) = 0 THEN '{name}'" for name, column in GROUPINGS.items()
    )
    sets = ", ".join(f"(state, {column})" for column in columns)
    return f"""
        SELECT CASE {kind} ELSE 'state' END AS kind, state, {", ".join(columns)},
               count(*) AS timers, sum(body_bytes) AS body_bytes,
               min(deliver_at_ms) AS min_deliver_ms, max(deliver_at_ms) AS max_deliver_ms,
               min(created_at_ms) AS min_created_ms, max(created_at_ms) AS max_created_ms,
               min(delay_ms) AS min_delay_ms, max(delay_ms) AS max_delay_ms,
               sum(delay_ms) AS sum_delay_ms, max(fire_late_ms) AS max_fire_late_ms
        FROM {view}
        GROUP BY GROUPING SETS ({sets}, (state))
    """
