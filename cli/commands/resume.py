"""`timerwheel resume`: resume a paused recurring series.

    timerwheel resume SERIES_ID [--json]

It goes on at its next time after now; the occurrences skipped while it was paused are
not caught up. Resuming a series that is not paused changes nothing (and says so). Same
--target, --timeout and exit codes as the other client commands
(`timerwheel.cli.client_command`).
"""

from __future__ import annotations

import argparse
import json

from timerwheel.cli.client_command import add_client_parser
from timerwheel.cli.times import format_ms


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_client_parser(subparsers, "resume", "resume a paused recurring series", _run)
    parser.add_argument("series_id", metavar="SERIES_ID")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _run(client, args: argparse.Namespace) -> int:
    answer = client.resume_series(args.series_id)
    if args.json:
        print(json.dumps({
            "series_id": args.series_id, "paused": False, "changed": answer.changed,
            "deliver_at_ms": answer.deliver_at_ms,
        }))  # fmt: skip
        return 0
    when = f"{format_ms(answer.deliver_at_ms)} ({answer.deliver_at_ms} ms)"
    if answer.changed:
        print(f"{args.series_id}: resumed; next occurrence at {when}")
    else:
        print(f"{args.series_id}: not paused; nothing changed (next occurrence at {when})")
    return 0
