"""What `timerwheel bulk-cancel`, `purge` and `redrive` share: the filter flags, and
running a bulk call page after page (docs/features.md, "Bulk cancel, purge and redrive").

    --topic T  --series ID  --id-prefix P  --from TIME  --to TIME     (AND; TIME as `list`)
    --limit N (per call, max 10000)  --page-token TOKEN  --all (every page)  --json
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable

from timerwheel.cli.client_command import time_range_ms


def add_filter_flags(parser: argparse.ArgumentParser, topic_help: str) -> None:
    parser.add_argument("--topic", default="", help=topic_help)
    parser.add_argument("--series", default="", help="a series id: it and its '<id>#<n>' ids")
    parser.add_argument("--id-prefix", default="", help="message ids that start with this")
    parser.add_argument(
        "--from", dest="from_", default="0", help="deliver time from: epoch ms, ISO, now or +5m"
    )
    parser.add_argument("--to", default="0", help="deliver time before: epoch ms, ISO or +1h")
    parser.add_argument(
        "--limit", type=int, default=0, help="messages changed per call (default 1000, max 10000)"
    )
    parser.add_argument("--page-token", default="", help="continue where a previous call stopped")
    parser.add_argument("--all", action="store_true", help="call again until none remain")
    parser.add_argument("--json", action="store_true", help="print one JSON object")


def filter_of(client, args: argparse.Namespace):
    from_ms, to_ms = time_range_ms(args)
    return client.timer_filter(
        topic=args.topic, series_id=args.series, id_prefix=args.id_prefix, from_ms=from_ms,
        to_ms=to_ms,
    )  # fmt: skip


def run_pages(
    call: Callable[[str], object], counted: tuple[str, ...], args: argparse.Namespace
) -> int:
    """Call `call(page_token)` once, or with --all until no token comes back; print the
    sums of the `counted` fields of the answers and, when more remain, the token."""
    totals = dict.fromkeys(counted, 0)
    token, calls = args.page_token, 0
    while True:
        answer = call(token)
        calls += 1
        for name in counted:
            totals[name] += getattr(answer, name)
        token = answer.next_page_token
        if not token or not args.all:
            break
    if args.json:
        print(json.dumps({**totals, "calls": calls, "next_page_token": token, "more": bool(token)}))
    else:
        print(", ".join(f"{name} {count:,}" for name, count in totals.items()))
    if token:
        print(f"more may remain: add --page-token {token} (or --all)", file=sys.stderr)
    return 0
