"""`timerwheel redrive`: move dead letters back to the topic they came from.

    timerwheel redrive orders.dlq [--topic orders] [--series ID] [--id-prefix P]
                       [--from T] [--to T] [--limit N] [--page-token TOKEN] [--all] [--json]

All of the dead-letter topic's dead letters, or those the filter flags select (--topic:
the topic they came from). Each fires again there with its attempts from 1. Needs role
admin.
"""

from __future__ import annotations

import argparse

from timerwheel.cli.bulk_flags import add_filter_flags, filter_of, run_pages
from timerwheel.cli.client_command import add_client_parser


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_client_parser(
        subparsers, "redrive", "move dead letters back to the topic they came from", _run
    )
    parser.add_argument("dead_letter_topic", metavar="DEAD_LETTER_TOPIC")
    add_filter_flags(parser, "only dead letters that came from this topic")


def _run(client, args: argparse.Namespace) -> int:
    selected = filter_of(client, args)
    return run_pages(
        lambda token: client.redrive(args.dead_letter_topic, selected, args.limit, token),
        ("moved",), args,
    )  # fmt: skip
