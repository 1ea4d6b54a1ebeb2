"""`timerwheel reschedule | count`: move a pending timer, count pending timers.

    timerwheel reschedule MESSAGE_ID --delay 5m        # or --at TIME, or --level N
    timerwheel count --topic orders [--from now] [--to +1h] [--json]

Same --target, --timeout and exit codes as the other client commands (`client_commands`).
"""

from __future__ import annotations

import argparse

from cli.commands.client_commands import UsageError, _parser, format_ms, parse_time_ms
from cli.config import parse_duration_ms


def register(subparsers: argparse._SubParsersAction) -> None:
    move = _parser(subparsers, "reschedule", "move a scheduled timer to a new time", _reschedule)
    move.add_argument("message_id", metavar="MESSAGE_ID")
    when = move.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay", help="deliver after 250ms, 90s, 5m, 2h, 3d from now")
    when.add_argument("--at", help="deliver at epoch ms, now, +DURATION or ISO 8601")
    when.add_argument("--level", type=int, help="RocketMQ 4 delay level (1..18 by default)")


def _reschedule(client, args: argparse.Namespace) -> int:
    try:
        if args.delay is not None:
            when = {"delay_ms": parse_duration_ms(args.delay, "--delay")}
        elif args.at is not None:
            when = {"deliver_at_ms": parse_time_ms(args.at, "--at")}
        else:
            when = {"delay_level": args.level}
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    deliver_at_ms = client.reschedule(args.message_id, **when)
    print(f"{args.message_id}: delivers at {format_ms(deliver_at_ms)} ({deliver_at_ms} ms)")
    return 0
