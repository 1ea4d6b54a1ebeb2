"""`timerwheel export`: a consistent cut of the store as SST files plus manifest.json.

    timerwheel export --out DIR --data-dir DATA     # a stopped store, read directly
    timerwheel export --out NAME --target HOST:PORT # a running server (TimerAdmin.Export)

With --data-dir, DIR may be any URI pyarrow's filesystems open (file:///backups/tw,
s3://bucket/tw, gs://..., hdfs://... when pyarrow has them): the export is made in local
temp space, then uploaded (manifest last).
With --target the *server* writes the export, and only below its export root
(`serve --export-root ROOT`, off by default): NAME is a folder relative to ROOT, e.g.
`nightly/monday`. A secured server also takes --tls-ca, --tls-cert/--tls-key and
--token-file (an admin token); see docs/security.md.
"""

from __future__ import annotations

import argparse
import sys
import time

from timerwheel.cli.connection import add_connection_flags, connection_from_args
from timerwheel.common import TimerwheelError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export",
        help="export a consistent cut of the timers as SST files + manifest.json",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--data-dir", help="a stopped server's data dir, exported directly")
    source.add_argument("--target", help="HOST:PORT of a running server, which writes --out")
    parser.add_argument(
        "--out", required=True,
        help="output dir or URI (file://, s3://, ...), new or empty "
        "(with --target: relative to the server's export root)",
    )  # fmt: skip
    parser.add_argument(
        "--max-rows-per-file", type=int, default=0,
        help="rows per SST file (0: the default, 500000)",
    )  # fmt: skip
    parser.add_argument(
        "--workers", type=int, default=None,
        help="with --data-dir: processes that write the files (default: one per CPU; "
        "a store of under 400,000 rows is written by this process alone)",
    )  # fmt: skip
    add_connection_flags(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.max_rows_per_file < 0:
        print(f"--max-rows-per-file={args.max_rows_per_file}: must be >= 0", file=sys.stderr)
        return 2
    if args.workers is not None and (args.workers < 1 or args.data_dir is None):
        why = "must be >= 1" if args.workers < 1 else "applies to --data-dir only"
        print(f"--workers={args.workers}: {why}", file=sys.stderr)
        return 2
    try:
        if args.data_dir is not None:
            return _export_stopped(args)
        return _export_live(args)
    except (TimerwheelError, OSError) as exc:
        print(f"export failed: {exc}", file=sys.stderr)
        return 1


def _export_stopped(args: argparse.Namespace) -> int:
    from timerwheel.store.export import export_data_dir

    progress = _Progress()
    summary = export_data_dir(
        args.data_dir, args.out, max_rows_per_file=args.max_rows_per_file, progress=progress,
        workers=args.workers,
    )  # fmt: skip
    progress.done()
    rate = summary.timers / summary.seconds if summary.seconds else 0.0
    print(
        f"exported {summary.timers:,} timers ({summary.rows:,} rows, {summary.files} files, "
        f"{summary.bytes:,} bytes) to {summary.out_dir} in {summary.seconds:.1f} s "
        f"({rate:,.0f} timers/s); cut at {summary.cut_at_ms} ms"
    )
    return 0


def _export_live(args: argparse.Namespace) -> int:
    from timerwheel.client import TimerClient  # the gRPC client (TimerAdmin.Export)

    try:
        connection = connection_from_args(args)
        client = TimerClient(
            args.target, timeout_s=None, tls=connection.tls, token=connection.token
        )
    except ValueError as exc:
        print(f"timerwheel export: {exc}", file=sys.stderr)
        return 2
    # The server resolves --out below its export root; no local path means anything there.
    print(f"asking {args.target} to export to {args.out} ...", file=sys.stderr, flush=True)
    with client:
        result = client.export(args.out, args.max_rows_per_file)
    rate = result.rows / 2 / result.seconds if result.seconds else 0.0
    print(
        f"server {args.target} exported {result.rows:,} rows ({result.files} files) to "
        f"{result.out_dir} in {result.seconds:.1f} s (~{rate:,.0f} timers/s); "
        f"cut at {result.cut_at_ms} ms"
    )
    for node in result.nodes:  # cluster mode: each node wrote its own partitions on its machine
        print(
            f"  node {node.node} at {node.address}: partitions "
            f"{','.join(map(str, node.partitions)) or '-'}, {node.timers:,} timers "
            f"({node.rows:,} rows, {node.files} files, {node.bytes:,} bytes) in {node.out_dir} "
            f"on its machine, cut at {node.cut_at_ms} ms"
        )
    if result.nodes:
        print(
            "  each node's folder is a whole export of its partitions: copy them to one place "
            "and give each to `timerwheel report --input DIR --input DIR ...` for one report"
        )
    return 0


class _Progress:
    """Rows written so far, on one self-updating line when stderr is a terminal."""

    def __init__(self) -> None:
        self._started = time.monotonic()
        self._tty = sys.stderr.isatty()
        self._last_line = 0

    def __call__(self, rows: int) -> None:
        elapsed = time.monotonic() - self._started
        line = f"exported {rows:,} rows ({rows / elapsed if elapsed else 0:,.0f} rows/s)"
        if self._tty:
            print(f"\r{line}", end="", file=sys.stderr, flush=True)
        elif rows - self._last_line >= 1_000_000:
            self._last_line = rows
            print(line, file=sys.stderr, flush=True)

    def done(self) -> None:
        if self._tty:
            print(file=sys.stderr)
