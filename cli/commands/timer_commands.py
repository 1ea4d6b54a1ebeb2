"""`timerwheel reschedule | count`: move a pending timer, count pending timers.

    timerwheel reschedule MESSAGE_ID --delay 5m        # or --at TIME, or --level N
    timerwheel count --topic orders [--from now] [--to +1h] [--json]

Same --target, --timeout and exit codes as the other client commands
(`timerwheel.cli.client_command`).
"""

from __future__ import annotations

import argparse
import json

from timerwheel.cli.client_command import UsageError, add_client_parser, time_range_ms
from timerwheel.cli.times import format_ms, parse_delay_ms, parse_time_ms


def register(subparsers: argparse._SubParsersAction) -> None:
    move = add_client_parser(
        subparsers, "reschedule", "move a scheduled timer to a new time", _reschedule
    )
    move.add_argument("message_id", metavar="MESSAGE_ID")
    when = move.add_mutually_exclusive_group(required=True)
    when.add_argument("--delay", help="deliver after 250ms, 90s, 5m, 2h, 3d from now (unit needed)")
    when.add_argument("--at", help="deliver at epoch ms, now, +DURATION or ISO 8601")
    when.add_argument("--level", type=int, help="RocketMQ 4 delay level (1..18 by default)")

    count = add_client_parser(subparsers, "count", "count a topic's pending timers", _count)
    count.add_argument("--topic", required=True)
    count.add_argument("--from", dest="from_", default="0", help="epoch ms, ISO, now or +5m")
    count.add_argument("--to", default="0", help="epoch ms, ISO or +1h; 0: no bound")
    count.add_argument("--json", action="store_true", help="print one JSON object")


def _reschedule(client, args: argparse.Namespace) -> int:
    try:
        if args.delay is not None:
            when = {"delay_ms": parse_delay_ms(args.delay, "--delay")}
        elif args.at is not None:
            when = {"deliver_at_ms": parse_time_ms(args.at, "--at")}
        else:
            when = {"delay_level": args.level}
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    deliver_at_ms = client.reschedule(args.message_id, **when)
    print(f"{args.message_id}: delivers at {format_ms(deliver_at_ms)} ({deliver_at_ms} ms)")
    return 0


def _count(client, args: argparse.Namespace) -> int:
    from_ms, to_ms = time_range_ms(args)
    answer = client.count(args.topic, from_ms, to_ms)
    if args.json:
        fields = {"pending": answer.pending, "from_ms": answer.from_ms, "to_ms": answer.to_ms}
        print(json.dumps({"topic": args.topic, **fields}))
    elif answer.from_ms or answer.to_ms:
        to_text = format_ms(answer.to_ms) if answer.to_ms < 2**62 else "the end"
        print(
            f"{answer.pending} pending in {args.topic} due from "
            f"{format_ms(answer.from_ms)} to {to_text} (whole minutes)"
        )
    else:
        print(f"{answer.pending} pending in {args.topic}")
    return 0
