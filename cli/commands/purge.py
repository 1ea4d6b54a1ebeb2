"""`timerwheel purge`: cancel what a filter selects, and drop its fired, un-acked messages.

    timerwheel purge --topic orders [--series ID] [--id-prefix P] [--from T] [--to T]
                     [--limit N] [--page-token TOKEN] [--all] [--json]
    timerwheel purge --topic orders.dlq --all          # empty a dead-letter topic

Beyond bulk-cancel, the messages that fired and were not acked (on their topic, or on
a dead-letter topic) become CANCELLED and are never delivered again. Needs role admin.
"""

from __future__ import annotations

import argparse

from timerwheel.cli.bulk_flags import add_filter_flags, filter_of, run_pages
from timerwheel.cli.client_command import add_client_parser


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_client_parser(
        subparsers, "purge",
        "cancel what a filter selects and drop its fired, un-acked messages (dead letters too)",
        _run,
    )  # fmt: skip
    add_filter_flags(parser, "messages of this topic now (a dead-letter topic: its dead letters)")


def _run(client, args: argparse.Namespace) -> int:
    selected = filter_of(client, args)
    return run_pages(
        lambda token: client.purge(selected, args.limit, token), ("cancelled", "purged"), args
    )
