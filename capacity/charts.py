"""The report's charts: one PNG per question, drawn with matplotlib's Agg backend.

Each chart answers one question at a glance (its title says which), with times in UTC.
The time charts are zoomed to where the load is: the per-hour and per-minute charts show
48 hours from the first due timer in full (every hour and minute drawn, zero where nothing
is due), and the whole horizon, however long its tail, has a per-day chart of its own on a
log scale, so three timers a year away neither squeeze the next day into a sliver nor
vanish. The 2,880 minutes are a heat map, a row per hour and a cell per minute, coloured
on a log scale: as bars they were thinner than a pixel and one spike flattened the rest.
Counts are whole numbers with thousands separators; every label stays inside its chart.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, datetime

import matplotlib

matplotlib.use("Agg")  # no display: must come before pyplot is imported

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import numpy as np
import pyarrow as pa
from matplotlib.colors import LogNorm
from matplotlib.ticker import EngFormatter, FuncFormatter, MaxNLocator

from timerwheel.capacity.seconds import DAY_MS, HOUR_MS, MINUTE_MS, ZOOM_MS

LATE_COLOUR = "#d62728"
OK_COLOUR = "#1f77b4"
MAX_TOPICS = 20
COUNT = FuncFormatter(lambda value, _pos: f"{value:,.0f}")


@dataclass(frozen=True)
class Chart:
    """A drawn chart; time charts also say which window they show and how much is in it."""

    file: str
    from_ms: int | None = None
    until_ms: int | None = None
    timers_shown: int | None = None


def draw_all(result, charts_dir: str) -> dict[str, Chart]:
    """Draw every chart of `result` (timerwheel.capacity.tables.ReportTables) into `charts_dir`."""
    os.makedirs(charts_dir, exist_ok=True)
    tables, summary, seconds = result.tables, result.summary, result.seconds
    start = seconds.zoom_start_ms
    drawn = {
        "due_per_hour": _zoomed(seconds.zoom["due_per_hour"], start, HOUR_MS, "hour"),
        "due_per_minute": _minute_heat_map(seconds.zoom["due_per_minute"], start),
        "due_per_day": _per_day(seconds.per_day),
        "peak_seconds": _peaks(tables["peak_seconds"], summary["drain_rate"]),
        "topics": _topics(tables["topics"]),
        "delay_distribution": _delays(tables["delay_distribution"]),
        "wheel_occupancy": _wheels(tables["wheel_occupancy"]),
        "storage_projection": _storage(tables["storage_projection"]),
    }
    charts = {}
    for name, (figure, window) in drawn.items():
        file_name = f"{name}.png"
        figure.tight_layout()
        figure.savefig(os.path.join(charts_dir, file_name), dpi=96)
        plt.close(figure)
        charts[name] = Chart(file_name, *window)
    return charts


def _figure(height: float = 4.2):
    figure, axes = plt.subplots(figsize=(10, height))
    return figure, axes


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


def _counts_axis(axis) -> None:
    axis.set_major_locator(MaxNLocator(integer=True))
    axis.set_major_formatter(COUNT)


def _time_axis(axes) -> None:
    locator = mdates.AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _zero_filled(table: pa.Table, start_ms: int, until_ms: int, step_ms: int) -> list[int]:
    """Counts per step over [start, until), 0 where the table has no row."""
    counts = [0] * ((until_ms - start_ms) // step_ms)
    (column,) = (c for c in table.column_names if c.endswith("start_ms"))
    starts = table.column(column).to_pylist()
    for at, timers in zip(starts, table.column("timers").to_pylist(), strict=True):
        counts[(at - start_ms) // step_ms] = timers
    return counts


def _zoomed(table: pa.Table, start_ms: int | None, step_ms: int, unit: str):
    figure, axes = _figure()
    if start_ms is None:
        axes.set_title(f"Timers due per {unit}")
        _empty(axes)
        return figure, (None, None, 0)
    until_ms = start_ms + ZOOM_MS
    counts = _zero_filled(table, start_ms, until_ms, step_ms)
    times = [_when(start_ms + i * step_ms) for i in range(len(counts) + 1)]
    axes.set_title(
        f"Timers due per {unit}, the 48 h from {_when(start_ms):%Y-%m-%d %H:%M} UTC "
        f"({sum(counts):,} timers)"
    )
    if unit == "hour":
        axes.bar(times[:-1], counts, width=1 / 24, align="edge", color=OK_COLOUR)
    else:
        axes.stairs(counts, times, fill=True, color=OK_COLOUR, linewidth=1)
    axes.set_xlim(times[0], times[-1])
    axes.set_ylabel(f"timers per {unit}")
    _counts_axis(axes.yaxis)
    _time_axis(axes)
    return figure, (start_ms, until_ms, sum(counts))


def _minute_heat_map(table: pa.Table, start_ms: int | None):
    """The 48 h of minutes as 48 rows (hours) of 60 cells (minutes), coloured by the
    timers due in each on a log scale; a minute with none is left blank."""
    figure, axes = _figure(8.4)
    if start_ms is None:
        axes.set_title("Timers due per minute")
        _empty(axes)
        return figure, (None, None, 0)
    hours = ZOOM_MS // HOUR_MS
    counts = _zero_filled(table, start_ms, start_ms + ZOOM_MS, MINUTE_MS)
    grid = np.ma.masked_equal(np.array(counts, dtype=float).reshape(hours, 60), 0)
    busiest = int(np.argmax(counts))
    axes.set_title(
        f"Timers due per minute, the 48 h from {_when(start_ms):%Y-%m-%d %H:%M} UTC "
        f"({sum(counts):,} timers)\na row per hour, a cell per minute; busiest minute "
        f"{_when(start_ms + busiest * MINUTE_MS):%Y-%m-%d %H:%M} UTC: {counts[busiest]:,}"
    )
    if grid.count():
        norm = LogNorm(vmin=1, vmax=max(2, grid.max()))
        image = axes.imshow(grid, aspect="auto", cmap="viridis", norm=norm,
                            interpolation="nearest")  # fmt: skip
        bar = figure.colorbar(image, ax=axes, pad=0.02)
        bar.set_label("timers due in the minute (log scale)")
        bar.ax.yaxis.set_major_formatter(COUNT)
    axes.set_facecolor("#f4f4f4")  # blank minutes: none due
    rows = range(0, hours, 3)
    axes.set_yticks(list(rows), [f"{_when(start_ms + r * HOUR_MS):%m-%d %H:00}" for r in rows])
    axes.set_xticks(range(0, 60, 5))
    axes.set_xlim(-0.5, 59.5)
    axes.set_ylim(hours - 0.5, -0.5)
    axes.set_xlabel("minute of the hour")
    axes.set_ylabel("hour (UTC)")
    return figure, (start_ms, start_ms + ZOOM_MS, sum(counts))


def _per_day(table: pa.Table):
    figure, axes = _figure(3.6)
    axes.set_title("Timers due per day, the whole horizon (log scale: the long tail shows)")
    if table.num_rows == 0:
        _empty(axes)
        return figure, (None, None, 0)
    days = table.column("day_start_ms").to_pylist()
    first, until = days[0], days[-1] + DAY_MS
    counts = _zero_filled(table, first, until, DAY_MS)
    times = [_when(first + i * DAY_MS) for i in range(len(counts))]
    axes.bar(times, counts, width=1, align="edge", color=OK_COLOUR)
    axes.set_yscale("log")
    axes.set_ylim(bottom=0.7)  # a day with one timer still shows a bar
    axes.yaxis.set_major_formatter(COUNT)
    axes.set_ylabel("timers per day")
    axes.set_xlim(_when(first), _when(until))
    _time_axis(axes)
    return figure, (first, until, sum(counts))


def _peaks(table: pa.Table, drain_rate: int):
    labels = table.column("second_utc").to_pylist()[::-1]
    figure, axes = _figure(max(3.0, 0.4 * len(labels) + 1.4))
    axes.set_title(f"Busiest seconds vs the drain rate {drain_rate:,}/s (red: fires late)")
    if not labels:
        _empty(axes)
        return figure, (None, None, None)
    counts = table.column("timers").to_pylist()[::-1]
    late = table.column("late").to_pylist()[::-1]
    colours = [LATE_COLOUR if flag else OK_COLOUR for flag in late]
    bars = axes.barh(range(len(labels)), counts, color=colours)
    axes.bar_label(bars, labels=[f"{c:,}" for c in counts], padding=3, fontsize=10)
    axes.set_yticks(range(len(labels)), [f"{label} UTC" for label in labels], fontsize=10)
    axes.axvline(drain_rate, color="black", linestyle="--", linewidth=1, label="drain rate")
    axes.set_xlim(0, max(max(counts), drain_rate) * 1.15)  # room for the counts' labels
    axes.set_xlabel("timers due in the second")
    _counts_axis(axes.xaxis)
    axes.legend(loc="lower right")
    return figure, (None, None, None)


def _topics(table: pa.Table):
    top = table.slice(0, MAX_TOPICS)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, max(3.0, 0.35 * top.num_rows + 1.4)))
    names = top.column("topic").to_pylist()[::-1]
    for axes, column, title in (
        (left, "timers", "Pending timers per topic"),
        (right, "body_bytes", "Pending body bytes per topic"),
    ):
        axes.set_title(title + (f" (top {MAX_TOPICS})" if table.num_rows > MAX_TOPICS else ""))
        axes.barh(range(len(names)), top.column(column).to_pylist()[::-1], color=OK_COLOUR)
        axes.set_yticks(range(len(names)), names, fontsize=9)
        if column == "body_bytes":
            axes.xaxis.set_major_formatter(EngFormatter(unit="B"))
        else:
            _counts_axis(axes.xaxis)
    if not names:
        _empty(left)
    return figure, (None, None, None)


def _delays(table: pa.Table):
    figure, axes = _figure()
    axes.set_title("Delay distribution: deliver time minus send time (pending timers)")
    axes.bar(
        table.column("bucket").to_pylist(), table.column("timers").to_pylist(), color=OK_COLOUR
    )
    axes.set_ylabel("timers")
    _counts_axis(axes.yaxis)
    return figure, (None, None, None)


def _wheels(table: pa.Table):
    figure, axes = _figure(3.6)
    axes.set_title("Wheel occupancy (pending timers per wheel)")
    if table.num_rows == 0:
        _empty(axes)
        return figure, (None, None, None)
    counts = table.column("timers").to_pylist()
    bars = axes.bar(table.column("wheel").to_pylist(), counts, color=OK_COLOUR)
    axes.bar_label(bars, labels=[f"{c:,}" for c in counts])
    axes.set_ylabel("timers")
    _counts_axis(axes.yaxis)
    return figure, (None, None, None)


def _storage(table: pa.Table):
    """Steady-state storage against the send rate: a line through the origin, with the
    table's scenarios (the observed rate, the drain rate) marked on it."""
    figure, axes = _figure(3.8)
    axes.set_title("Steady-state storage = send rate x (mean delay + retention) x bytes/timer")
    rates = table.column("send_rate_per_second").to_pylist()
    sizes = table.column("bytes").to_pylist()
    top = max(rates) if rates else 0
    if top <= 0:
        _empty(axes)
        return figure, (None, None, None)
    per_rate = sizes[rates.index(top)] / top
    axes.plot([0, top * 1.1], [0, per_rate * top * 1.1], color=OK_COLOUR)
    for scenario, rate, size in zip(
        table.column("scenario").to_pylist(), rates, sizes, strict=True
    ):
        axes.plot([rate], [size], "o", color=LATE_COLOUR)
        right = rate > top * 0.55  # a label right of the middle reads leftwards
        axes.annotate(f"{scenario}: {size / 2**30:,.2f} GiB", (rate, size),
                      textcoords="offset points", xytext=(-8, 6) if right else (8, 6),
                      ha="right" if right else "left", va="bottom", fontsize=10,
                      annotation_clip=False)  # fmt: skip
    axes.set_xlabel("sustained send rate (timers/s)")
    axes.set_ylabel("SST bytes")
    axes.xaxis.set_major_formatter(COUNT)
    axes.yaxis.set_major_formatter(FuncFormatter(lambda value, _pos: f"{value / 2**30:,.1f} GiB"))
    axes.set_xlim(0, top * 1.1)
    axes.set_ylim(0, max(per_rate * top * 1.25, 1))  # room above the highest label
    return figure, (None, None, None)


def _empty(axes) -> None:
    axes.text(0.5, 0.5, "no pending timers", ha="center", va="center", transform=axes.transAxes)
