"""The report's HTML page: key figures first, then one section per chart with its table.

A static, self-contained page (the charts are PNG files beside it, the full tables are
linked as CSV and Parquet). Every value from the data is escaped.
"""

from __future__ import annotations

import html
from datetime import UTC, datetime

import pyarrow as pa

MAX_TABLE_ROWS = 25

_STYLE = """
* { box-sizing: border-box; }
body { font-family: system-ui, sans-serif; margin: 2em auto; padding: 0 1em; max-width: 1100px;
       color: #222; overflow-wrap: anywhere; }
h1 { margin-bottom: 0.2em; } .sub { color: #666; margin-top: 0; }
.headline { font-size: 1.15em; background: #f5f8fc; border-left: 4px solid #1f77b4;
            padding: 0.6em 0.9em; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; max-width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: right; }
th { background: #f3f3f3; } td.text { text-align: left; }
tr.late td { background: #fde0e0; }
.figures td:first-child { text-align: left; font-weight: 600; } .figures th { text-align: left; }
.figures td.source { text-align: left; color: #555; font-size: 0.9em; }
img { max-width: 100%; height: auto; border: 1px solid #eee; }
figure { margin: 0.5em 0; } figcaption { color: #555; font-size: 0.9em; }
.links { font-size: 0.85em; color: #555; }
"""

SECTIONS = (  # (chart, title, table shown under it)
    ("due_per_hour", "Timers due per hour (the next 48 h)", "due_per_hour"),
    ("due_per_minute", "Timers due per minute (the next 48 h, as a heat map)", "due_per_minute"),
    ("due_per_day", "Timers due per day (the whole horizon)", None),
    ("peak_seconds", "Peak seconds", "peak_seconds"),
    ("topics", "Topics", "topics"),
    ("delay_distribution", "Delay distribution", "delay_distribution"),
    ("wheel_occupancy", "Wheel occupancy", "wheel_occupancy"),
    ("storage_projection", "Storage at steady state", "storage_projection"),
)
# Epoch-millisecond times: shown as UTC text on the page (the files keep the numbers).
_TIME_SUFFIXES = ("start_ms", "deliver_ms", "created_ms")


def render(result, charts: dict) -> str:
    """The page of `result` (timerwheel.capacity.tables.ReportTables) with `charts`
    (timerwheel.capacity.charts)."""
    summary = result.summary
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<title>timerwheel capacity report</title>",
        f"<style>{_STYLE}</style></head><body>",
        "<h1>timerwheel capacity report</h1>",
        f"<p class='sub'>Export cut at {_when(summary.get('cut_at_ms'))} "
        f"from {html.escape(str(summary.get('source', '')))}; "
        f"report made in {summary.get('report_seconds', 0):.1f} s. All times are UTC.</p>",
        _headline(summary),
        "<h2>Key figures</h2>",
        _figures(summary),
    ]
    for name, title, table_name in SECTIONS:
        parts.append(f"<h2>{html.escape(title)}</h2>")
        if name in charts:
            parts.append(_figure(name, title, charts[name], summary["pending_timers"]))
        if name == "storage_projection":
            parts.append(_assumptions(summary))
        if table_name is not None:
            table, rows = _shown(result, table_name)
            parts.append(_table(table, rows, late_column=name == "peak_seconds"))
            parts.append(_links(table_name))
    parts.append("<h2>Records by state</h2>")
    parts.append(_table(result.tables["states"], result.tables["states"].num_rows))
    parts.append(_links("states"))
    parts.append("</body></html>")
    return "\n".join(parts)


def _shown(result, name: str) -> tuple[pa.Table, int]:
    """The rows to show and the table's full row count (Spark wrote the large tables)."""
    if name in result.tables:
        return result.tables[name], result.tables[name].num_rows
    return result.seconds.heads[name], result.seconds.rows[name]


def _figure(name: str, title: str, chart, pending: int) -> str:
    data = f" data-chart='{name}'"
    caption = ""
    if chart.from_ms is not None:
        data += f" data-from-ms='{chart.from_ms}' data-until-ms='{chart.until_ms}'"
        data += f" data-timers='{chart.timers_shown}'"
        share = 100 * chart.timers_shown / pending if pending else 0.0
        caption = (
            f"<figcaption>{_when(chart.from_ms)} to {_when(chart.until_ms)}: "
            f"{_count(chart.timers_shown, 'pending timer')} of {pending:,} ({share:.1f} %)"
            "</figcaption>"
        )
    image = f"<img src='charts/{html.escape(chart.file)}' alt='{html.escape(title)}'>"
    return f"<figure class='chart'{data}>{image}{caption}</figure>"


def _assumptions(summary: dict) -> str:
    return (
        "<p class='links'>Little's law: a timer is stored from its send until it fires (the "
        f"mean delay of the pending timers, {_duration(summary.get('delay_avg_ms'))}), then "
        f"kept for the retention ({_duration(summary['retention_ms'])}, the service's default "
        "<code>retention_ms</code>, assumed: the export does not record the server's "
        f"setting), at {summary['bytes_per_timer']:,.1f} SST bytes per timer as measured in "
        "this export. Scenarios: the send rate observed in the export (records over the span "
        "of their send times; a short burst overstates it) and the drain rate "
        f"({_drain_source(summary)}).</p>"
    )


def _headline(summary: dict) -> str:
    """What the report says first, and what it assumes to say it: the observed send rate,
    over the window it was observed in, goes on."""
    rate = summary["send_rate_per_second"]
    if not rate:
        return (
            "<p class='headline'>No steady state can be projected: the export's records "
            "were all sent in the same millisecond (or there are none), so no send rate "
            "was observed.</p>"
        )
    first, last = summary["first_created_ms"], summary["last_created_ms"]
    window = f"{_when(first, seconds=True)} to {_when(last, seconds=True)}"
    span = _duration(last - first)
    if summary.get("disk_bytes_per_timer_source") == "data dir":
        size = (
            f"{_bytes(summary['steady_state_disk_bytes'])} on disk "
            f"({_bytes(summary['steady_state_bytes'])} of exported SST)"
        )
    else:
        size = (
            f"{_bytes(summary['steady_state_bytes'])} of exported SST (the store's size on "
            "disk is not in the export)"
        )
    text = (
        f"At steady state, assuming the send rate of {window} ({span}: "
        f"{rate:,.2f} timers/s) continues, the store levels off at {size}"
    )
    text += f"; {_disk_verdict(summary)}."
    if last - first < 3_600_000:
        text += (
            f" The rate was observed over {span} only: if that was a burst, the steady "
            "state is smaller."
        )
    return f"<p class='headline'>{html.escape(text)}</p>"


def _disk_verdict(summary: dict) -> str:
    free, total = summary.get("disk_free_bytes"), summary.get("disk_total_bytes")
    if free is None:
        return "the disk's free space is unknown (the export does not record it)"
    disk = f"the data dir's disk had {_bytes(free)} free of {_bytes(total)} at the cut"
    if summary.get("disk_fills") is None:
        return disk
    if not summary["disk_fills"]:
        return f"{disk}, so it does not fill at this rate"
    return f"{disk}: full in {summary['days_until_disk_full']:,.1f} days at this rate"


def _drain_source(summary: dict) -> str:
    """Where the drain rate comes from, and the flag that sets it."""
    flag, measured = summary["drain_rate_flag"], summary.get("measured_drain_rate")
    seconds = _count(summary.get("behind_seconds", 0), "second")
    how = (
        "the most timers fired in one second while the service was behind (a timer fired "
        f"1 s or more late), over {seconds} of the export's fired records"
    )
    source = summary["drain_rate_source"]
    if source == "measured":
        return f"measured: {how}; set it with {flag} N"
    if measured:
        also = f"measured in the export: {measured:,}/s, {how}"
    else:
        also = "not measured: the export holds no second in which the service fired behind"
    if source == "configured":
        return f"configured: {flag} {summary['drain_rate']}; {also}"
    return f"assumed: the default of {flag}, {also}; set it with {flag} N"


def _figures(summary: dict) -> str:
    """The key figures, each with where it comes from."""
    export = "export"
    first, last = summary["first_created_ms"], summary["last_created_ms"]
    sent = f"{_when(first, seconds=True)} to {_when(last, seconds=True)}" if first else "-"
    free, total = summary.get("disk_free_bytes"), summary.get("disk_total_bytes")
    days = summary.get("days_until_disk_full")
    if free is None or summary.get("disk_fills") is None:
        full = "-"
    else:
        full = f"{days:,.1f} days" if summary["disk_fills"] else "does not fill"
    rows = [
        ("Pending timers", _int(summary["pending_timers"]), f"{export}: SCHEDULED records"),
        ("Pending body bytes", _bytes(summary["pending_body_bytes"]),
         f"{export}: bodies of the SCHEDULED records"),
        ("Stored records (all states)", _int(summary["records"]),
         f"{export}: every record, retained FIRED/ACKED/CANCELLED too"),
        ("Due from / until (UTC hour)",
         f"{_when(summary['first_due_hour_ms'])} / {_when(summary['last_due_hour_ms'])}",
         f"{export}: deliver times of the pending timers"),
        ("Peak second", f"{_when(summary['peak_second_ms'], seconds=True)}: "
                        f"{_count(summary['peak_second_timers'], 'timer')}",
         f"{export}: pending timers per second"),
        ("Drain rate", f"{_int(summary['drain_rate'])} timers/s", _drain_source(summary)),
        ("Seconds over the drain rate (fire late)",
         f"{_count(summary['seconds_over_drain_rate'], 'second')}, "
         f"{_count(summary['timers_in_late_seconds'], 'timer')}",
         f"{export}: pending seconds against the drain rate above"),
        ("Delay p50 / p90 / p99", " / ".join(
            _duration(summary.get(f"delay_p{q}_ms")) for q in (50, 90, 99)),
         f"{export}: deliver time minus send time of the pending timers (2 % bins)"),
        ("SST bytes (export)", _bytes(summary["sst_bytes"]), "export manifest"),
        ("Storage per timer", f"{summary['bytes_per_timer']:,.1f} B",
         f"{export}: SST bytes over records"),
        ("Observed send rate", f"{summary['send_rate_per_second']:,.2f} timers/s",
         f"{export}: records over the span of their send times, {sent}"),
        ("Storage at steady state (observed rate)", _bytes(summary["steady_state_bytes"]),
         "projection: observed send rate x (mean delay + retention, the default 3 d: "
         "assumed) x SST bytes per timer"),
        ("Data dir's disk at the cut",
         "-" if free is None else f"{_bytes(free)} free of {_bytes(total)}",
         "export manifest: the data dir's filesystem at the cut"
         if free is not None else "not in the export (made before it recorded the disk)"),
        ("Store on disk at the cut", _bytes(summary.get("store_bytes")),
         f"export manifest: the data dir's files; {summary['disk_bytes_per_timer']:,.1f} B "
         f"a record (from the {summary['disk_bytes_per_timer_source']})"),
        ("Days until the disk is full", full,
         "projection: free space over the growth at the observed send rate, "
         f"{_bytes(summary['disk_growth_bytes_per_day'])} a day, the soonest it can fill; "
         f"it levels off at {_bytes(summary['steady_state_disk_bytes'])}"),
    ]  # fmt: skip
    head = "<tr><th>figure</th><th>value</th><th>source</th></tr>"
    body = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(v)}</td>"
        f"<td class='source'>{html.escape(source)}</td></tr>"
        for k, v, source in rows
    )
    return f"<table class='figures'>{head}{body}</table>"


def _table(table: pa.Table, total_rows: int, *, late_column: bool = False) -> str:
    """The first rows of `table`; a time in ms shows as UTC text, or not at all when the
    table has its own UTC column; the UTC column comes first."""
    utc = [c for c in table.column_names if c.endswith("_utc")]
    times = [c for c in table.column_names if c.endswith(_TIME_SUFFIXES)]
    columns = utc + [c for c in table.column_names if c not in utc and not (utc and c in times)]
    head = "".join(f"<th>{html.escape(_heading(c))}</th>" for c in columns)
    rows = []
    for row in table.slice(0, MAX_TABLE_ROWS).to_pylist():
        cells = "".join(
            _cell(_when(row[c], seconds=True) if c in times and row[c] is not None else row[c])
            for c in columns
        )
        css = " class='late'" if late_column and row.get("late") else ""
        rows.append(f"<tr{css}>{cells}</tr>")
    more = ""
    if total_rows > min(MAX_TABLE_ROWS, table.num_rows):
        shown = min(MAX_TABLE_ROWS, table.num_rows)
        more = f"<p class='links'>First {shown} of {total_rows:,} rows.</p>"
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>{more}"


def _heading(column: str) -> str:
    for suffix in _TIME_SUFFIXES:
        if column.endswith(suffix):
            return column.removesuffix("_ms").replace("_", " ") + " (UTC)"
    return column.replace("_utc", " (UTC)").replace("_", " ")  # spaces: a heading may wrap


def _cell(value: object) -> str:
    if isinstance(value, bool) or value is None or isinstance(value, str):
        text = "" if value is None else str(value)
        return f"<td class='text'>{html.escape(text)}</td>"
    if isinstance(value, float):
        return f"<td>{value:,.2f}</td>"
    if isinstance(value, int):
        return f"<td>{value:,}</td>"
    return f"<td>{html.escape(str(value))}</td>"


def _links(name: str) -> str:
    return (
        f"<p class='links'>Full table: <a href='tables/{name}.csv'>CSV</a>, "
        f"<a href='tables/{name}.parquet'>Parquet</a></p>"
    )


def _when(ms: int | None, *, seconds: bool = False) -> str:
    if ms is None:
        return "-"
    pattern = "%Y-%m-%d %H:%M:%S" if seconds else "%Y-%m-%d %H:%M"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime(pattern) + " UTC"


def _count(value: int, noun: str) -> str:
    """'1 second', '2 seconds', '1,024 timers'."""
    return f"{value:,} {noun}" + ("" if value == 1 else "s")


def _int(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.1f} {unit}" if unit != "B" else f"{int(value):,} B"
        value /= 1024
    raise AssertionError("unreachable")


def _duration(ms: int | None) -> str:
    if ms is None:
        return "-"
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1_000)):
        if abs(ms) >= size:
            return f"{ms / size:,.1f} {unit}"
    return f"{ms} ms"
