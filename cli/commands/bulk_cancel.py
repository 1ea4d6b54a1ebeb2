"""`timerwheel bulk-cancel`: cancel the scheduled timers a filter selects.

    timerwheel bulk-cancel --topic orders [--series ID] [--id-prefix P] [--from T] [--to T]
                           [--limit N] [--page-token TOKEN] [--all] [--json]

At least one of the filter flags; every one given must match. Prints what it cancelled;
more may remain after one call (the limit, or a scan budget): --all goes on until none do.
"""

from __future__ import annotations

import argparse

from timerwheel.cli.bulk_flags import add_filter_flags, filter_of, run_pages
from timerwheel.cli.client_command import add_client_parser


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_client_parser(
        subparsers, "bulk-cancel", "cancel the scheduled timers a filter selects", _run
    )
    add_filter_flags(parser, "timers of this topic")


def _run(client, args: argparse.Namespace) -> int:
    selected = filter_of(client, args)
    return run_pages(
        lambda token: client.bulk_cancel(selected, args.limit, token), ("cancelled",), args
    )
