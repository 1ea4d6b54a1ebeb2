"""`timerwheel report`: the capacity report of an export, made by a PySpark job.

    timerwheel report --input EXPORT_DIR --out REPORT_DIR [--master URL]
    timerwheel report --input NODE1_PART --input NODE2_PART ... --out REPORT_DIR

Writes REPORT_DIR/index.html (open it in a browser), charts/*.png, tables/*.parquet and
*.csv, and summary.json. Spark runs locally (local[*]) unless --master says otherwise.
Several --input folders (a cluster's nodes' parts of one export) make one report.
"""

from __future__ import annotations

import argparse
import sys


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "report",
        help="capacity report (HTML, charts, Parquet/CSV) of an export, on Spark",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--input", required=True, action="append",
        help="an export dir or URI (file://, s3://, ...) to read; repeat it to read several "
        "as one (a cluster's nodes' parts of one export)",
    )  # fmt: skip
    parser.add_argument("--out", required=True, help="report dir: must be new or empty")
    engine = parser.add_mutually_exclusive_group()
    engine.add_argument("--master", default="local[*]", help="Spark master URL (local[*])")
    engine.add_argument("--remote", help="a Spark Connect server, sc://HOST:PORT")
    parser.add_argument(
        "--drain-rate", type=int, default=None, metavar="TIMERS_PER_S",
        help="timers/s the service fires; busier seconds are flagged late (default: "
        "measured in the export, the most fired in a second while behind; else 10000, "
        "said to be assumed)",
    )  # fmt: skip
    parser.add_argument(
        "--top-seconds", type=int, default=20, help="how many peak seconds to list (20)"
    )
    parser.add_argument(
        "--conf", action="append", default=[], metavar="KEY=VALUE",
        help="a Spark setting, e.g. spark.executor.memory=512m (repeatable)",
    )  # fmt: skip
    parser.set_defaults(func=run)


REPORT_EXTRA_HINT = (
    "timerwheel report needs the report extra (PySpark, pyarrow, matplotlib): "
    "pip install 'timerwheel[report]' (from a checkout: pip install -e '.[report]')"
)


def run(args: argparse.Namespace) -> int:
    try:
        from timerwheel.capacity.report import ReportError, ReportRequest, run_report
        from timerwheel.capacity.tables import ReportOptions
    except ImportError as exc:
        if (exc.name or "").split(".")[0] not in {"pyspark", "pyarrow", "matplotlib"}:
            raise
        print(f"{REPORT_EXTRA_HINT} ({exc.name} is missing)", file=sys.stderr)
        return 2
    from timerwheel.store.export_files import ExportFormatError

    try:
        options = ReportOptions(drain_rate=args.drain_rate, top_seconds=args.top_seconds)
    except ValueError as exc:
        print(f"report: {exc}", file=sys.stderr)
        return 2
    conf = dict(item.partition("=")[::2] for item in args.conf)
    bad = [item for item in args.conf if "=" not in item or not item.split("=", 1)[0]]
    if bad:
        print(f"report: --conf {bad[0]!r}: must be KEY=VALUE", file=sys.stderr)
        return 2
    request = ReportRequest(
        args.input[0], args.out, args.master, options, conf, remote=args.remote,
        more_inputs=tuple(args.input[1:]),
    )  # fmt: skip
    try:
        result = run_report(request, say=lambda message: print(message, file=sys.stderr))
    except (ReportError, ExportFormatError, OSError) as exc:
        print(f"report failed: {exc}", file=sys.stderr)
        return 1
    summary = result.summary
    print(
        f"report written to {result.out_dir}/index.html in {result.seconds:.1f} s: "
        f"{_count(summary['pending_timers'], 'pending timer')}, peak second "
        f"{_count(summary['peak_second_timers'], 'timer')}, "
        f"{_count(summary['seconds_over_drain_rate'], 'second')} over the drain rate "
        f"({summary['drain_rate']:,}/s, {summary['drain_rate_source']})"
    )
    return 0


def _count(value: int, noun: str) -> str:
    return f"{value:,} {noun}" + ("" if value == 1 else "s")
