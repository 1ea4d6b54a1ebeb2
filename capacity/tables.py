"""The report's tables, derived on the driver from the bounded results of the one pass
(timerwheel.capacity.job) and of the per-second summary (timerwheel.capacity.seconds, which writes
the per-minute and per-hour tables itself).

Everything about *when* load arrives is over the pending (SCHEDULED) timers: they are
the future work. Per-topic and per-state tables also count the records kept for
retention (FIRED, ACKED, CANCELLED), because those hold storage too. Times are epoch
milliseconds; the `*_utc` columns are for people.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc

from timerwheel.capacity.job import DAY_MS, DELAY_BUCKETS, HOUR_MS, SECOND_MS, delay_bin_upper_ms
from timerwheel.capacity.seconds import SecondsResult
from timerwheel.store import keys

DELAY_QUANTILES = (0.5, 0.9, 0.99)


DEFAULT_DRAIN_RATE = 10_000  # timers/s, assumed when neither given nor measured
DRAIN_RATE_FLAG = "--drain-rate"


@dataclass(frozen=True)
class ReportOptions:
    # Timers the service can fire per second, as configured (`--drain-rate`); None: the
    # rate measured in the export, else DEFAULT_DRAIN_RATE, said to be assumed.
    drain_rate: int | None = None
    top_seconds: int = 20
    # How long fired records are kept after they are acked or cancelled: the service's
    # default `retention_ms`; the export does not record the server's setting.
    retention_ms: int = 3 * DAY_MS

    def __post_init__(self) -> None:
        if self.drain_rate is not None and self.drain_rate <= 0:
            raise ValueError(f"drain_rate={self.drain_rate}: must be a positive timers/second")
        if self.top_seconds <= 0:
            raise ValueError(f"top_seconds={self.top_seconds}: must be positive")
        if self.retention_ms < 0:
            raise ValueError(f"retention_ms={self.retention_ms}: must be >= 0")


@dataclass
class ReportTables:
    tables: dict[str, pa.Table] = field(default_factory=dict)  # written by the driver
    summary: dict = field(default_factory=dict)
    seconds: SecondsResult | None = None  # the per-second tables, written by Spark


def resolve_drain_rate(options: ReportOptions, rates: dict) -> dict:
    """The drain rate the report uses and where it comes from: `--drain-rate` when given
    ("configured"), else the rate measured in the export (timerwheel.capacity.job.fire_rates:
    the most fired in one second while the service was behind), else the default, said to
    be "assumed". Never a default shown as if measured."""
    measured = rates.get("measured_drain_rate")
    if options.drain_rate is not None:
        rate, source = options.drain_rate, "configured"
    elif measured:
        rate, source = int(measured), "measured"
    else:
        rate, source = DEFAULT_DRAIN_RATE, "assumed"
    return {
        "drain_rate": rate,
        "drain_rate_source": source,
        "drain_rate_flag": DRAIN_RATE_FLAG,
        "measured_drain_rate": measured,
        "behind_seconds": rates.get("behind_seconds", 0),
        "most_fired_in_a_second": rates.get("most_fired_in_a_second", 0),
    }


def build_tables(
    grouped: pa.Table, seconds: SecondsResult, manifest: dict, options: ReportOptions
) -> ReportTables:
    """Every driver-side table from the bounded groupings and the per-second results."""
    pending = grouped.filter(pc.equal(grouped["state"], "SCHEDULED"))
    drain = resolve_drain_rate(options, seconds.fire_rates)
    out = ReportTables(seconds=seconds)
    out.tables["peak_seconds"] = _peak_seconds(seconds.peaks, drain["drain_rate"])
    out.tables["topics"] = _topics(_kind(grouped, "topic"))
    out.tables["delay_distribution"] = _delay_buckets(_kind(pending, "delay_bucket"))
    out.tables["wheel_occupancy"] = _wheels(_kind(pending, "wheel"))
    states = _kind(grouped, "state")
    out.tables["states"] = (
        states.select(["state", "timers", "body_bytes"])
        .rename_columns(["state", "records", "body_bytes"])
        .sort_by("state")
    )
    delays = _delay_stats(_kind(pending, "state"), _kind(pending, "delay_bin"))
    out.tables["storage_projection"], storage = _projection(
        states, manifest, options, drain["drain_rate"], delays["delay_avg_ms"] or 0
    )
    out.summary = {
        **drain,
        "cut_at_ms": manifest.get("cut_at_ms"),
        "retention_ms": options.retention_ms,
        "seconds_over_drain_rate": seconds.late_seconds,
        "timers_in_late_seconds": seconds.timers_in_late_seconds,
        **_pending_summary(seconds, out.tables),
        **delays,
        **storage,
        **_headroom(manifest, storage, delays["delay_avg_ms"] or 0, options.retention_ms),
    }
    return out


def _kind(table: pa.Table, kind: str) -> pa.Table:
    return table.filter(pc.equal(table["kind"], kind))


def _sum(table: pa.Table, column: str) -> int:
    return pc.sum(table[column]).as_py() or 0


def _utc(millis: pa.ChunkedArray, pattern: str) -> pa.Array:
    """Whole-second UTC text (a millisecond timestamp would print '%S' as '20.000')."""
    seconds = pc.divide(millis, SECOND_MS).cast(pa.timestamp("s", tz="UTC"))
    return pc.strftime(seconds, format=pattern)


def _peak_seconds(top: pa.Table, rate: int) -> pa.Table:
    """The busiest seconds (from Spark, busiest first); one whose timers exceed the drain
    rate fires partly late."""
    timers = top["timers"].to_pylist()
    drain_ms = [-(-count * SECOND_MS // rate) for count in timers]  # ceiling division
    return (
        top.add_column(0, "second_utc", _utc(top["second_start_ms"], "%Y-%m-%d %H:%M:%S"))
        .append_column("drain_ms", pa.array(drain_ms, pa.int64()))
        .append_column("late", pa.array([count > rate for count in timers], pa.bool_()))
        # The last timer of the second fires this long after the second ends.
        .append_column("max_late_ms", pa.array([max(0, d - SECOND_MS) for d in drain_ms]))
    )


def _topics(by_topic: pa.Table) -> pa.Table:
    pending = pc.equal(by_topic["state"], "SCHEDULED")
    none = pa.scalar(None, pa.int64())
    table = pa.table(
        {
            "topic": by_topic["topic"],
            "timers": pc.if_else(pending, by_topic["timers"], 0),
            "body_bytes": pc.if_else(pending, by_topic["body_bytes"], 0),
            "records": by_topic["timers"],
            "record_body_bytes": by_topic["body_bytes"],
            "first_deliver_ms": pc.if_else(pending, by_topic["min_deliver_ms"], none),
            "last_deliver_ms": pc.if_else(pending, by_topic["max_deliver_ms"], none),
        }
    )
    summed = ["timers", "body_bytes", "records", "record_body_bytes"]
    return (
        table.group_by("topic")
        .aggregate([(c, "sum") for c in summed]
                   + [("first_deliver_ms", "min"), ("last_deliver_ms", "max")])
        .rename_columns(["topic", *summed, "first_deliver_ms", "last_deliver_ms"])
        .sort_by([("timers", "descending"), ("records", "descending"), ("topic", "ascending")])
    )  # fmt: skip


def _delay_buckets(by_bucket: pa.Table) -> pa.Table:
    counts = {
        row["delay_bucket"]: (row["timers"], row["body_bytes"]) for row in by_bucket.to_pylist()
    }
    uppers = [lower for _, lower in DELAY_BUCKETS[1:]] + [None]
    return pa.table(
        {
            "bucket": [label for label, _ in DELAY_BUCKETS],
            "lower_ms": [lower for _, lower in DELAY_BUCKETS],
            "upper_ms": pa.array(uppers, pa.int64()),
            "timers": [counts.get(i, (0, 0))[0] for i in range(len(DELAY_BUCKETS))],
            "body_bytes": [counts.get(i, (0, 0))[1] for i in range(len(DELAY_BUCKETS))],
        }
    )


def _delay_stats(pending_total: pa.Table, by_bin: pa.Table) -> dict:
    """Exact min/max/mean delay; percentiles from the fine bins (within 2 %)."""
    if pending_total.num_rows == 0:
        return {"delay_min_ms": None, "delay_max_ms": None, "delay_avg_ms": None,
                **{f"delay_p{round(q * 100)}_ms": None for q in DELAY_QUANTILES}}  # fmt: skip
    total = pending_total.to_pylist()[0]
    bins = by_bin.sort_by("delay_bin").to_pylist()
    stats = {
        "delay_min_ms": total["min_delay_ms"],
        "delay_max_ms": total["max_delay_ms"],
        "delay_avg_ms": round(total["sum_delay_ms"] / total["timers"]),
    }
    for q in DELAY_QUANTILES:
        seen, wanted = 0, q * total["timers"]
        for row in bins:
            seen += row["timers"]
            if seen >= wanted:
                estimate = min(delay_bin_upper_ms(row["delay_bin"]), total["max_delay_ms"])
                stats[f"delay_p{round(q * 100)}_ms"] = estimate
                break
    return stats


def _wheels(by_wheel: pa.Table) -> pa.Table:
    """Scheduled timers per wheel; '(none)' would mean a timer no wheel holds (a bug)."""
    return pa.table(
        {
            "wheel": pc.fill_null(by_wheel["wheel"], "(none)"),
            "timers": by_wheel["timers"],
            "body_bytes": by_wheel["body_bytes"],
            "first_deliver_ms": by_wheel["min_deliver_ms"],
            "last_deliver_ms": by_wheel["max_deliver_ms"],
        }
    ).sort_by("first_deliver_ms")


def _projection(
    states: pa.Table, manifest: dict, options: ReportOptions, drain_rate: int, delay_avg_ms: int
):
    """Storage at steady state, by Little's law: a timer is stored from its send until it
    fires (the mean delay), then kept for the retention, so a sustained send rate R holds
    R x (delay + retention) timers of `bytes_per_timer` SST bytes each. Two scenarios: the
    send rate observed in the export (records / span of their send times) and the drain
    rate (the most the service fires per second, so the most it can sustain)."""
    records = _sum(states, "timers")
    first_created = pc.min(states["min_created_ms"]).as_py()
    last_created = pc.max(states["max_created_ms"]).as_py()
    sst_bytes = manifest["totals"]["bytes"]
    bytes_per_timer = sst_bytes / records if records else 0.0
    span_ms = (last_created or 0) - (first_created or 0)
    rate = records * SECOND_MS / span_ms if span_ms > 0 else 0.0
    scenarios = [("observed send rate", rate), ("drain rate", float(drain_rate))]
    stay_ms = delay_avg_ms + options.retention_ms
    stored = [round(r * stay_ms / SECOND_MS) for _, r in scenarios]
    table = pa.table(
        {
            "scenario": [name for name, _ in scenarios],
            "send_rate_per_second": [round(r, 3) for _, r in scenarios],
            "mean_delay_ms": [delay_avg_ms] * len(scenarios),
            "retention_ms": [options.retention_ms] * len(scenarios),
            "bytes_per_timer": [round(bytes_per_timer, 1)] * len(scenarios),
            "stored_timers": stored,
            "bytes": [round(n * bytes_per_timer) for n in stored],
        }
    )
    storage = {
        "records": records,
        "sst_bytes": sst_bytes,
        "messages_sst_bytes": manifest["totals"]["families"][keys.CF_MESSAGES]["bytes"],
        "bytes_per_timer": round(bytes_per_timer, 1),
        "first_created_ms": first_created,
        "last_created_ms": last_created,
        "send_rate_per_second": round(rate, 3),
        "steady_state_bytes": table["bytes"][0].as_py(),
    }
    return table, storage


def _headroom(manifest: dict, storage: dict, delay_avg_ms: int, retention_ms: int) -> dict:
    """Days until the data dir's disk is full, if the observed send rate goes on.

    From the free space of the data dir's filesystem at the cut (the manifest's
    `data_dir_disk`; an older export has none: unknown). The store holds
    `bytes_per_timer` on disk a record (the data dir's files over the records, else the
    export's SST bytes) and grows by at most send rate x bytes per timer a second, since
    nothing leaves it before its delay and retention are over; it levels off at the steady
    state (send rate x (mean delay + retention) timers). So the disk is full in
    free / growth days at the soonest, or never when the steady state fits in it."""
    disk = manifest.get("data_dir_disk") or {}
    free, total, store = disk.get("free_bytes"), disk.get("total_bytes"), disk.get("store_bytes")
    records, rate = storage["records"], storage["send_rate_per_second"]
    if store and records:
        per_timer, per_timer_source = store / records, "data dir"
    else:
        per_timer, per_timer_source = storage["bytes_per_timer"], "export SST"
    steady = rate * (delay_avg_ms + retention_ms) / SECOND_MS * per_timer
    growth_per_day = rate * per_timer * DAY_MS / SECOND_MS
    current = store if store is not None else storage["sst_bytes"]
    days, fills = None, None
    if free is not None and growth_per_day > 0:
        fills = steady - current > free
        days = round(free / growth_per_day, 1) if fills else None
    return {
        "disk_free_bytes": free,
        "disk_total_bytes": total,
        "store_bytes": store,
        "disk_bytes_per_timer": round(per_timer, 1),
        "disk_bytes_per_timer_source": per_timer_source,
        "steady_state_disk_bytes": round(steady),
        "disk_growth_bytes_per_day": round(growth_per_day),
        "disk_fills": fills,
        "days_until_disk_full": days,
    }


def _pending_summary(seconds: SecondsResult, tables: dict[str, pa.Table]) -> dict:
    totals = seconds.totals
    peaks = tables["peak_seconds"].to_pylist()
    first, last = totals["first_due_second_ms"], totals["last_due_second_ms"]
    return {
        "pending_timers": totals["pending_timers"],
        "pending_body_bytes": totals["pending_body_bytes"],
        "first_due_hour_ms": None if first is None else first // HOUR_MS * HOUR_MS,
        "last_due_hour_ms": None if last is None else last // HOUR_MS * HOUR_MS,
        "peak_second_ms": peaks[0]["second_start_ms"] if peaks else None,
        "peak_second_timers": peaks[0]["timers"] if peaks else 0,
    }
