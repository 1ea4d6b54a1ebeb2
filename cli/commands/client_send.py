"""`timerwheel send`: send a timer message to a running server.

    timerwheel send --topic orders --body 'pay #42' --delay 90s [--id ID] [--property k=v]
    timerwheel send --topic orders --body hi --at +1h                # epoch ms, ISO, +DURATION
    timerwheel send --topic orders --body hi --level 3               # RocketMQ 4: 10s
    timerwheel send --topic jobs --id nightly --cron '0 5 * * *' --tz Europe/Paris
    timerwheel send --topic jobs --id debounce-7 --delay 30s --if-exists replace

A send whose --id is already stored stores nothing and says so, with the stored timer's
state (e.g. CANCELLED: it will not be delivered); it still exits 0 (an idempotent retry).

--target, the TLS and token flags and the exit codes are every client command's
(timerwheel.cli.client_command).
"""

from __future__ import annotations

import argparse
import json
import sys

from timerwheel.cli.client_command import UsageError, add_client_parser
from timerwheel.cli.times import format_ms, parse_delay_ms, parse_time_ms
from timerwheel.durations import parse_duration_ms


def register(subparsers: argparse._SubParsersAction) -> None:
    send = add_client_parser(subparsers, "send", "send a timer message", _send)
    send.add_argument("--topic", required=True)
    body = send.add_mutually_exclusive_group()
    body.add_argument("--body", default="", help="message body (text)")
    body.add_argument("--body-file", help="read the body from this file ('-': stdin)")
    when = send.add_mutually_exclusive_group()
    when.add_argument("--delay", help="deliver after 250ms, 90s, 5m, 2h or 3d (unit needed)")
    when.add_argument("--at", help="deliver at epoch ms, or an ISO 8601 time (UTC if no zone)")
    when.add_argument("--level", type=int, help="RocketMQ 4 delay level (1..18 by default)")
    send.add_argument("--id", default="", help="message id: the send is idempotent on it")
    send.add_argument(
        "--property", action="append", default=[], metavar="KEY=VALUE", help="repeatable"
    )
    send.add_argument("--json", action="store_true", help="print the result as JSON")
    send.add_argument(
        "--if-exists",
        choices=["reject", "replace", "keep"],
        default="reject",
        help="when --id is taken: refuse (default), replace a pending one, keep",
    )
    send.add_argument("--max-attempts", type=int, help="deliveries before the dead-letter topic")
    send.add_argument("--dead-letter-topic", default="", help="default: <topic>.dlq")
    every = send.add_mutually_exclusive_group()
    every.add_argument("--every", help="repeat at this interval (90s, 5m, ...); needs --id")
    every.add_argument("--cron", help="repeat on this cron expression; needs --id")
    send.add_argument("--tz", default="", help="IANA time zone of --cron (default UTC)")
    send.add_argument("--until", help="no occurrence after this time (epoch ms, ISO, +1d)")
    send.add_argument("--max-count", type=int, default=0, help="at most this many occurrences")
    send.add_argument(
        "--missed",
        choices=["once", "each"],
        default="once",
        help="occurrences missed while down: fire once, or each",
    )
    send.add_argument(
        "--catch-up-window",
        help="skip missed occurrences older than this before now (1s..; e.g. 1h)",
    )
    send.add_argument(
        "--max-catch-up", type=int, default=0,
        help="with --missed each: fire at most this many missed occurrences (1..1000)",
    )  # fmt: skip


def _send(client, args: argparse.Namespace) -> int:
    when: dict[str, object] = {}
    try:
        if args.delay is not None:
            when["delay_ms"] = parse_delay_ms(args.delay, "--delay")
        elif args.at is not None:
            when["deliver_at_ms"] = parse_time_ms(args.at, "--at")
        elif args.level is not None:
            when["delay_level"] = args.level
        elif not (args.every or args.cron):
            raise ValueError("give one of --delay, --at, --level (or --every / --cron)")
        _check_series_id(args)
        properties = dict(_key_value(item) for item in args.property)
        when.update(_send_options(args))
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    result = client.send(args.topic, _body(args), properties=properties, message_id=args.id, **when)
    if args.json:
        print(json.dumps({
            "message_id": result.message_id, "deliver_at_ms": result.deliver_at_ms,
            "existed": result.existed,
            "existing_state": result.existing_state.name if result.existed else None,
        }))  # fmt: skip
    elif result.existed:
        state = result.existing_state
        print(
            f"{result.message_id} already existed ({state.name}): nothing new was stored; "
            + _EXISTED.get(state.name, f"it delivers at {format_ms(result.deliver_at_ms)}")
        )
    else:
        print(f"sent {result.message_id}, delivers at {format_ms(result.deliver_at_ms)}")
    return 0


_EXISTED = {  # what an idempotent retry means for each state the stored timer can be in
    "FIRED": "it fired already and is being delivered",
    "ACKED": "it was delivered and acked; it will not be delivered again",
    "CANCELLED": "it was cancelled and will not be delivered",
}


# == helpers ================================================================================
def _check_series_id(args: argparse.Namespace) -> None:
    """A series (--every / --cron) needs --id: the server makes a new id for each send
    without one, so a retried send would start a second series, firing twice as often."""
    if (args.every or args.cron) and not args.id:
        flag = "--every" if args.every else "--cron"
        raise ValueError(
            f"{flag} needs --id: name the series (e.g. --id nightly-report) so that a "
            "retried send does not start a second one"
        )


def _send_options(args: argparse.Namespace) -> dict[str, object]:
    """The SendRequest fields of --if-exists, --max-attempts, --dead-letter-topic and the
    repeat flags (--every / --cron with --tz, --until, --max-count, --missed,
    --catch-up-window, --max-catch-up)."""
    from timerwheel.v1 import timerwheel_pb2 as pb

    fields: dict[str, object] = {"if_exists": ["reject", "replace", "keep"].index(args.if_exists)}
    if args.max_attempts is not None:
        fields["max_attempts"] = args.max_attempts
    if args.dead_letter_topic:
        fields["dead_letter_topic"] = args.dead_letter_topic
    if args.every or args.cron:
        fields["repeat"] = pb.Repeat(
            every_ms=parse_duration_ms(args.every, "--every") if args.every else 0,
            cron=args.cron or "", time_zone=args.tz,
            end_at_ms=parse_time_ms(args.until, "--until") if args.until else 0,
            max_count=args.max_count, missed=["once", "each"].index(args.missed),
            catch_up_window_ms=(
                parse_duration_ms(args.catch_up_window, "--catch-up-window")
                if args.catch_up_window else 0
            ),
            max_catch_up=args.max_catch_up,
        )  # fmt: skip
    return fields


def _body(args: argparse.Namespace) -> bytes:
    if args.body_file is None:
        return args.body.encode()
    try:
        if args.body_file == "-":
            return sys.stdin.buffer.read()
        with open(args.body_file, "rb") as file:
            return file.read()
    except OSError as exc:
        raise UsageError(f"--body-file={args.body_file!r}: {exc.strerror}") from exc


def _key_value(item: str) -> tuple[str, str]:
    key, sep, value = item.partition("=")
    if not sep or not key:
        raise ValueError(f"--property={item!r}: expected KEY=VALUE")
    return key, value
