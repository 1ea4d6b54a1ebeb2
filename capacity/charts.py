"""The report's charts: one PNG per question, drawn with matplotlib's Agg backend.

Each chart answers one question at a glance (its title says which), with time on the x
axis in UTC and the drain rate drawn where it matters. Every function takes the Arrow
tables of capacity.tables and writes one file; none needs a display.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

import matplotlib

matplotlib.use("Agg")  # no display: must come before pyplot is imported

import matplotlib.dates as mdates
import matplotlib.pyplot as plt
import pyarrow as pa
from matplotlib.ticker import EngFormatter

LATE_COLOUR = "#d62728"
OK_COLOUR = "#1f77b4"
MAX_TOPICS = 20


def draw_all(tables: dict[str, pa.Table], summary: dict, charts_dir: str) -> dict[str, str]:
    """Draw every chart into `charts_dir`; returns chart name -> file name."""
    os.makedirs(charts_dir, exist_ok=True)
    drawn = {}
    for name, draw in (
        ("due_per_hour", lambda ax: _due(ax, tables["due_per_hour"], "hour")),
        ("due_per_minute", lambda ax: _due(ax, tables["due_per_minute"], "minute")),
        ("peak_seconds", lambda ax: _peaks(ax, tables["peak_seconds"], summary["drain_rate"])),
        ("topics", None),
        ("delay_distribution", lambda ax: _delays(ax, tables["delay_distribution"])),
        ("wheel_occupancy", lambda ax: _wheels(ax, tables["wheel_occupancy"])),
        ("storage_projection", lambda ax: _growth(ax, tables["storage_projection"], summary)),
    ):
        file_name = f"{name}.png"
        path = os.path.join(charts_dir, file_name)
        if draw is None:
            _topics(tables["topics"], path)
        else:
            figure, axes = plt.subplots(figsize=(10, 4.2))
            draw(axes)
            _save(figure, path)
        drawn[name] = file_name
    return drawn


def _save(figure, path: str) -> None:
    figure.tight_layout()
    figure.savefig(path, dpi=96)
    plt.close(figure)


def _times(table: pa.Table, column: str) -> list[datetime]:
    return [datetime.fromtimestamp(ms / 1000, UTC) for ms in table.column(column).to_pylist()]


def _due(axes, table: pa.Table, unit: str) -> None:
    axes.set_title(f"Timers due per {unit} (pending, UTC)")
    if table.num_rows == 0:
        _empty(axes)
        return
    times = _times(table, f"{unit}_start_ms")
    counts = table.column("timers").to_pylist()
    if unit == "hour" and len(times) <= 400:
        axes.bar(times, counts, width=1 / 24, align="edge", color=OK_COLOUR)
    else:
        axes.step(times, counts, where="post", color=OK_COLOUR, linewidth=0.8)
        axes.fill_between(times, counts, step="post", alpha=0.3, color=OK_COLOUR)
    axes.set_ylabel(f"timers per {unit}")
    axes.yaxis.set_major_formatter(EngFormatter())
    locator = mdates.AutoDateLocator()
    axes.xaxis.set_major_locator(locator)
    axes.xaxis.set_major_formatter(mdates.ConciseDateFormatter(locator))


def _peaks(axes, table: pa.Table, drain_rate: int) -> None:
    axes.set_title(f"Busiest seconds vs drain rate {drain_rate:,}/s (red: fires late)")
    if table.num_rows == 0:
        _empty(axes)
        return
    labels = table.column("second_utc").to_pylist()[::-1]
    counts = table.column("timers").to_pylist()[::-1]
    late = table.column("late").to_pylist()[::-1]
    colours = [LATE_COLOUR if flag else OK_COLOUR for flag in late]
    axes.barh(range(len(labels)), counts, color=colours)
    axes.set_yticks(range(len(labels)), labels, fontsize=7)
    axes.axvline(drain_rate, color="black", linestyle="--", linewidth=1, label="drain rate")
    axes.set_xlabel("timers due in the second")
    axes.xaxis.set_major_formatter(EngFormatter())
    axes.legend(loc="lower right")
    axes.figure.set_size_inches(10, max(3.0, 0.28 * len(labels) + 1.2))


def _topics(table: pa.Table, path: str) -> None:
    top = table.slice(0, MAX_TOPICS)
    figure, (left, right) = plt.subplots(1, 2, figsize=(10, max(3.0, 0.3 * top.num_rows + 1.4)))
    names = top.column("topic").to_pylist()[::-1]
    for axes, column, title in (
        (left, "timers", "Pending timers per topic"),
        (right, "body_bytes", "Pending body bytes per topic"),
    ):
        axes.set_title(title + (f" (top {MAX_TOPICS})" if table.num_rows > MAX_TOPICS else ""))
        axes.barh(range(len(names)), top.column(column).to_pylist()[::-1], color=OK_COLOUR)
        axes.set_yticks(range(len(names)), names, fontsize=8)
        axes.xaxis.set_major_formatter(EngFormatter(unit="B" if column == "body_bytes" else ""))
    if not names:
        _empty(left)
    _save(figure, path)


def _delays(axes, table: pa.Table) -> None:
    axes.set_title("Delay distribution: deliver time minus send time (pending timers)")
    labels = table.column("bucket").to_pylist()
    axes.bar(labels, table.column("timers").to_pylist(), color=OK_COLOUR)
    axes.set_ylabel("timers")
    axes.yaxis.set_major_formatter(EngFormatter())


def _wheels(axes, table: pa.Table) -> None:
    axes.set_title("Wheel occupancy (pending timers per wheel)")
    if table.num_rows == 0:
        _empty(axes)
        return
    names = table.column("wheel").to_pylist()
    counts = table.column("timers").to_pylist()
    bars = axes.bar(names, counts, color=OK_COLOUR)
    axes.bar_label(bars, labels=[f"{c:,}" for c in counts])
    axes.set_ylabel("timers")
    axes.yaxis.set_major_formatter(EngFormatter())


def _growth(axes, table: pa.Table, summary: dict) -> None:
    rate = summary["send_rate_per_second"]
    axes.set_title(f"Storage if nothing were retired, at the observed {rate:,.1f} sends/s")
    days = [0, *table.column("days_ahead").to_pylist()]
    totals = [summary["sst_bytes"], *table.column("total_bytes").to_pylist()]
    axes.plot(days, totals, marker="o", color=OK_COLOUR)
    axes.set_xlabel("days from the export")
    axes.set_ylabel("SST bytes")
    axes.yaxis.set_major_formatter(EngFormatter(unit="B"))
    axes.set_ylim(bottom=0)


def _empty(axes) -> None:
    axes.text(0.5, 0.5, "no pending timers", ha="center", va="center", transform=axes.transAxes)
