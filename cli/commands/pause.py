"""`timerwheel pause`: pause a recurring series without deleting it.

    timerwheel pause SERIES_ID [--json]

Its occurrences are skipped until `timerwheel resume SERIES_ID`; none are caught up then.
Pausing a paused series changes nothing (and says so). Same --target, --timeout and exit
codes as the other client commands (`timerwheel.cli.client_command`).
"""

from __future__ import annotations

import argparse
import json

from timerwheel.cli.client_command import add_client_parser


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_client_parser(
        subparsers, "pause", "pause a recurring series (resume it with `resume`)", _run
    )
    parser.add_argument("series_id", metavar="SERIES_ID")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def _run(client, args: argparse.Namespace) -> int:
    answer = client.pause_series(args.series_id)
    if args.json:
        print(json.dumps({
            "series_id": args.series_id, "paused": True, "changed": answer.changed,
            "deliver_at_ms": answer.deliver_at_ms,
        }))  # fmt: skip
    elif answer.changed:
        print(
            f"{args.series_id}: paused; its occurrences are skipped until "
            f"`timerwheel resume {args.series_id}`"
        )
    else:
        print(f"{args.series_id}: already paused; nothing changed")
    return 0
