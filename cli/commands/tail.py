"""`timerwheel tail TOPIC`: print a topic's deliveries as they fire, for debugging.

    timerwheel tail orders                  # ack mode: print, then ack (consumes them)
    timerwheel tail orders --peek           # print, never ack: they are delivered again
    timerwheel tail orders --json --body --max 10

tail is a subscriber like any other: the topic's messages are shared among its
subscribers (queue semantics), so next to running consumers it sees only the share the
server hands it. Ack mode acks what it printed (those messages are done). Peek mode acks
nothing: when tail stops, the server delivers what it printed again at once (attempt + 1),
to whichever subscriber is there; while tail runs, they wait out the ack timeout. Stop
with Ctrl-C, or `--max N` messages.
"""

from __future__ import annotations

import argparse
import json
import sys

from timerwheel.cli.client_command import add_client_parser
from timerwheel.cli.times import format_ms


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = add_client_parser(subparsers, "tail", "print a topic's deliveries as they fire", _tail)
    parser.add_argument("topic", metavar="TOPIC")
    parser.add_argument("--peek", action="store_true", help="do not ack (see above)")
    parser.add_argument("--body", action="store_true", help="print the body too")
    parser.add_argument("--json", action="store_true", help="one JSON object per line")
    parser.add_argument("--max", type=int, default=0, help="stop after N messages (0: never)")
    parser.add_argument(
        "--max-in-flight", type=int, default=100, help="deliveries the server may hand out at once"
    )


def _tail(client, args: argparse.Namespace) -> int:
    printed = 0
    with client.subscribe(args.topic, args.max_in_flight) as stream:
        for batch in stream:
            if args.max:
                batch = batch[: args.max - printed]
            for delivery in batch:
                print(_line(delivery, args), flush=True)
            printed += len(batch)
            if not args.peek and batch:
                client.ack(args.topic, [d.message_id for d in batch])
            if args.max and printed >= args.max:
                break
    if not args.json:
        mode = "printed, not acked" if args.peek else "printed and acked"
        print(f"{printed} message(s) {mode}", file=sys.stderr)
    return 0


def _line(delivery, args: argparse.Namespace) -> str:
    late_ms = delivery.fired_at_ms - delivery.deliver_at_ms
    if args.json:
        out = {
            "message_id": delivery.message_id,
            "topic": delivery.topic,
            "deliver_at_ms": delivery.deliver_at_ms,
            "fired_at_ms": delivery.fired_at_ms,
            "attempt": delivery.attempt,
            "properties": dict(delivery.properties),
        }
        if args.body:
            out["body"] = delivery.body.decode(errors="replace")
        return json.dumps(out)
    props = ",".join(f"{k}={v}" for k, v in sorted(delivery.properties.items()))
    line = (
        f"{format_ms(delivery.fired_at_ms)}  {delivery.message_id}  attempt {delivery.attempt}"
        f"  due {format_ms(delivery.deliver_at_ms)} (+{late_ms} ms)"
    )
    if props:
        line += f"  {props}"
    if args.body:
        line += f"  {delivery.body.decode(errors='replace')!r}"
    return line
