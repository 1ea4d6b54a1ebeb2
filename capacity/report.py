"""The capacity report: export dir in, HTML page + charts + tables out.

    run_report(ReportRequest(input_dir="export/", out_dir="report/"))

Several exports read as one (`more_inputs`: the parts a cluster's nodes wrote of one
Export, timerwheel.capacity.several) make one report over all their timers.

writes into `out_dir`::

    index.html        key figures, charts and the head of every table
    charts/*.png      one chart per question (timerwheel.capacity.charts)
    tables/*.parquet  every table in full (timerwheel.capacity.tables), and the same as CSV
    summary.json      the key figures, machine-readable

The export is checked first (manifest, sizes, CRC-32s), so a damaged file is named
before Spark starts. ``index.html`` is written last: a report without it is unfinished.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import structlog

from timerwheel.capacity import charts, html
from timerwheel.capacity.job import aggregate, fire_rates, read_rows
from timerwheel.capacity.seconds import SecondsResult, summarise
from timerwheel.capacity.several import SeveralRefused, check_distinct, combined_manifest
from timerwheel.capacity.tables import (
    ReportOptions,
    ReportTables,
    build_tables,
    resolve_drain_rate,
)
from timerwheel.store.export_files import load_manifest, verify_files
from timerwheel.store.export_location import ExportLocation

log = structlog.get_logger("timerwheel.capacity")

Say = Callable[[str], None]


class ReportError(ValueError):
    """The report cannot be made; the message names the path."""


@dataclass(frozen=True)
class ReportRequest:
    input_dir: str
    out_dir: str
    master: str = "local[*]"
    options: ReportOptions = field(default_factory=ReportOptions)
    spark_conf: dict[str, str] = field(default_factory=dict)  # extra Spark settings
    # input_dir is a path on this pyarrow filesystem (else a local dir or a URI)
    filesystem: object | None = None
    remote: str | None = None  # a Spark Connect URL (sc://HOST:PORT) instead of `master`
    more_inputs: tuple[str, ...] = ()  # further exports read with input_dir as one


@dataclass(frozen=True)
class ReportResult:
    out_dir: str
    summary: dict
    seconds: float


def run_report(request: ReportRequest, *, spark=None, say: Say | None = None) -> ReportResult:
    """Make the report; uses `spark` if given (tests share one), else starts its own."""
    started = time.monotonic()
    say = say or (lambda _message: None)
    if spark is None and not request.remote:  # a local driver starts a JVM: is there a Java?
        from timerwheel.capacity.java import java_problem

        problem = java_problem()
        if problem:
            raise ReportError(problem)
    _check_out_dir(request.out_dir)
    inputs = [request.input_dir, *request.more_inputs]
    try:
        check_distinct(inputs)
        locations = [ExportLocation.parse(given, request.filesystem) for given in inputs]
    except (ValueError, SeveralRefused) as exc:
        raise ReportError(str(exc)) from exc
    manifests = []
    for given, location in zip(inputs, locations, strict=True):
        say(f"checking export {given}")
        manifests.append(load_manifest(location))
        verify_files(location, manifests[-1], checksums=True)
    manifest = combined_manifest(manifests)
    own_session = spark is None
    if own_session:
        from timerwheel.capacity.spark import build_remote_session, build_session

        if request.remote:
            say(f"connecting to Spark Connect at {request.remote}")
            spark = build_remote_session(request.remote, conf=request.spark_conf)
        else:
            say(f"starting Spark ({request.master})")
            spark = build_session(request.master, conf=request.spark_conf)
    try:
        say(f"reading {manifest['totals']['rows']:,} rows in {manifest['totals']['files']} files")
        rows = None
        for location in locations:  # the exports' timers are disjoint: their union
            where = location.path if request.filesystem or location.local_dir else location.text
            more = read_rows(spark, where, request.filesystem)
            rows = more if rows is None else rows.unionByName(more)
        grouped, seconds = summarise_rows(rows, request.out_dir, request.options)
    finally:
        if own_session:
            spark.stop()
    result = build_tables(grouped, seconds, manifest, request.options)
    result.summary.update(
        service_now_ms=manifest.get("service_now_ms"),
        source=manifest.get("source", ""),
        export_dir=", ".join(location.local_dir or location.text for location in locations),
    )
    say("writing tables and charts")
    write_outputs(result, request.out_dir, started)
    seconds_taken = time.monotonic() - started
    log.info("report_written", out_dir=request.out_dir, seconds=round(seconds_taken, 2))
    return ReportResult(request.out_dir, result.summary, seconds_taken)


def summarise_rows(rows, out_dir: str, options: ReportOptions) -> tuple[pa.Table, SecondsResult]:
    """The Spark part: the one pass over `rows` (a DataFrame of the data source's schema),
    then the per-second tables written into `out_dir`/tables by Spark. Returns what the
    driver needs, none of it growing with the data."""
    tables_dir = os.path.abspath(os.path.join(out_dir, "tables"))
    os.makedirs(tables_dir, exist_ok=True)
    work_dir = os.path.join(os.path.abspath(out_dir), "spark-work")  # not hidden: Spark skips
    try:  # paths that start with '.' or '_'
        aggregated = aggregate(rows, work_dir)
        rates = fire_rates(aggregated.fired_seconds)
        drain = resolve_drain_rate(options, rates)
        seconds = summarise(
            aggregated.seconds,
            tables_dir,
            drain_rate=drain["drain_rate"],
            top_seconds=options.top_seconds,
        )
    finally:
        shutil.rmtree(work_dir, ignore_errors=True)
    return aggregated.grouped, dataclasses.replace(seconds, fire_rates=rates)


def write_outputs(result: ReportTables, out_dir: str, started: float) -> None:
    """The driver's tables, the charts, summary.json and, last, index.html."""
    tables_dir = os.path.join(out_dir, "tables")
    os.makedirs(tables_dir, exist_ok=True)
    for name, table in result.tables.items():
        pq.write_table(table, os.path.join(tables_dir, f"{name}.parquet"))
        pa_csv.write_csv(table, os.path.join(tables_dir, f"{name}.csv"))
    drawn = charts.draw_all(result, os.path.join(out_dir, "charts"))
    result.summary["report_seconds"] = round(time.monotonic() - started, 2)
    with open(os.path.join(out_dir, "summary.json"), "w", encoding="utf-8") as out:
        json.dump(result.summary, out, indent=2, sort_keys=True)
    page = html.render(result, drawn)
    with open(os.path.join(out_dir, "index.html"), "w", encoding="utf-8") as out:
        out.write(page)


def _check_out_dir(out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ReportError(f"report output {out_dir!r} exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise ReportError(
            f"report output dir {out_dir!r} exists and is not empty; choose a new --out"
        )
