"""`timerwheel send | get | cancel | list | stats`: talk to a running server.

    timerwheel send --topic orders --body 'pay #42' --delay 90s [--id ID] [--property k=v]
    timerwheel send --topic orders --body hi --at +1h                # epoch ms, ISO, +DURATION
    timerwheel send --topic orders --body hi --level 3               # RocketMQ 4: 10s
    timerwheel send --topic jobs --id nightly --cron '0 5 * * *' --tz Europe/Paris
    timerwheel send --topic jobs --id debounce-7 --delay 30s --if-exists replace
    timerwheel get MESSAGE_ID [--json] [--body] [--trace]            # --body: only the body
    timerwheel cancel MESSAGE_ID
    timerwheel list --topic orders [--from +0s] [--to +1h] [--limit 100] [--all] [--json]
    timerwheel stats [--json]

A send whose --id is already stored stores nothing and says so, with the stored timer's
state (e.g. CANCELLED: it will not be delivered); it still exits 0 (an idempotent retry).

Every command takes --target HOST:PORT (default $TIMERWHEEL_TARGET or 127.0.0.1:7070; a
bare HOST gets port 7070),
and for a secured server --tls-ca FILE [--tls-cert FILE --tls-key FILE] and
--token-file FILE (or $TIMERWHEEL_TOKEN); see docs/security.md.
Exit codes: 0 done, 1 refused by the server (not found, bad input, unreachable: the
message says which), 2 bad command line.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime

from cli.connection import add_connection_flags, connection_from_args
from wheels.domain import State
from wheels.durations import parse_duration_ms

DEFAULT_TARGET = "127.0.0.1:7070"


def register(subparsers: argparse._SubParsersAction) -> None:
    send = add_client_parser(subparsers, "send", "send a timer message", _send)
    send.add_argument("--topic", required=True)
    body = send.add_mutually_exclusive_group()
    body.add_argument("--body", default="", help="message body (text)")
    body.add_argument("--body-file", help="read the body from this file ('-': stdin)")
    when = send.add_mutually_exclusive_group()
    when.add_argument("--delay", help="deliver after 250ms, 90s, 5m, 2h, 3d or plain ms")
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

    get = add_client_parser(subparsers, "get", "show a timer by message id, in any state", _get)
    get.add_argument("message_id", metavar="MESSAGE_ID")
    get.add_argument("--json", action="store_true", help="print one JSON object")
    get.add_argument(
        "--body", action="store_true",
        help="print only the body, as stored (with --json: add it to the object)",
    )  # fmt: skip
    get.add_argument(
        "--trace", action="store_true",
        help="also print its life: sent, cascades, fired, each delivery attempt, acked",
    )  # fmt: skip

    cancel = add_client_parser(subparsers, "cancel", "cancel a scheduled timer", _cancel)
    cancel.add_argument("message_id", metavar="MESSAGE_ID")

    listing = add_client_parser(subparsers, "list", "list pending timers of a topic by time", _list)
    listing.add_argument("--topic", required=True)
    listing.add_argument("--from", dest="from_", default="0", help="epoch ms, ISO, or +5m")
    listing.add_argument("--to", default="0", help="epoch ms, ISO or +1h; 0: no bound")
    listing.add_argument("--limit", type=int, default=100, help="timers per page (max 1000)")
    listing.add_argument("--page-token", default="", help="continue from a previous page")
    listing.add_argument("--all", action="store_true", help="follow every page")
    listing.add_argument("--json", action="store_true", help="one JSON object per line")

    stats = add_client_parser(
        subparsers, "stats", "the server's counters: backlog, keys, memory", _stats
    )
    stats.add_argument("--json", action="store_true", help="print one JSON object")


def add_client_parser(
    subparsers: argparse._SubParsersAction, name: str, text: str, func: Callable
) -> argparse.ArgumentParser:
    """A sub-command that talks to a server: --target, --timeout and the TLS/token flags;
    `func(client, args)` runs with a connected `timerwheel.Client`, errors become exit
    codes with one clear line."""
    parser = subparsers.add_parser(name, help=text, description=text)
    parser.add_argument(
        "--target", default=os.environ.get("TIMERWHEEL_TARGET", DEFAULT_TARGET),
        help="HOST:PORT of the server (default $TIMERWHEEL_TARGET or 127.0.0.1:7070; "
        "a bare HOST gets port 7070)",
    )  # fmt: skip
    parser.add_argument("--timeout", type=float, default=10.0, help="seconds per call")
    add_connection_flags(parser)
    parser.set_defaults(func=lambda args: _run(name, func, args))
    return parser


def _run(name: str, func: Callable, args: argparse.Namespace) -> int:
    """Usage errors -> exit 2, server refusals -> exit 1, each with one clear line."""
    from timerwheel.client import RemoteError, TimerClient  # grpc only when a command runs

    try:
        try:
            connection = connection_from_args(args)
            client = TimerClient(
                args.target, timeout_s=args.timeout, tls=connection.tls, token=connection.token
            )
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        with client:
            return func(client, args)
    except UsageError as exc:
        print(f"timerwheel {name}: {exc}", file=sys.stderr)
        return 2
    except RemoteError as exc:
        print(f"timerwheel {name}: {exc}{_hint(exc, args)}", file=sys.stderr)
        return 1


class UsageError(ValueError):
    pass


def _hint(exc, args: argparse.Namespace) -> str:
    import grpc

    if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        from timerwheel.types import with_default_port

        return f" (is `timerwheel serve` running at {with_default_port(args.target)}?)"
    return ""


# == the commands ===========================================================================
def _send(client, args: argparse.Namespace) -> int:
    when: dict[str, object] = {}
    try:
        if args.delay is not None:
            when["delay_ms"] = parse_duration_ms(args.delay, "--delay")
        elif args.at is not None:
            when["deliver_at_ms"] = parse_time_ms(args.at, "--at")
        elif args.level is not None:
            when["delay_level"] = args.level
        elif not (args.every or args.cron):
            raise ValueError("give one of --delay, --at, --level (or --every / --cron)")
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


def _get(client, args: argparse.Namespace) -> int:
    from cli.trace_view import trace_dicts, trace_lines  # protos: only when a command runs

    message = client.get(args.message_id, include_body=args.body, include_trace=args.trace)
    if args.body and not args.json:
        sys.stdout.buffer.write(message.body)
        sys.stdout.flush()
        return 0
    if args.json:
        out = message_dict(message, args.body)
        if args.trace:
            out["attempts"] = message.attempts
            out["trace"] = trace_dicts(message.proto)
        print(json.dumps(out))
        return 0
    for label, value in human_lines(message):
        print(f"{label:<14}{value}")
    if args.trace:
        print(f"{'attempts':<14}{message.attempts}")
        print("trace")
        for line in trace_lines(message.proto, format_ms):
            print(f"  {line}")
    return 0


def _cancel(client, args: argparse.Namespace) -> int:
    state = client.cancel(args.message_id)
    print(f"{args.message_id}: {state.name}")
    return 0


def _stats(client, args: argparse.Namespace) -> int:
    stats = client.stats()
    if args.json:
        from google.protobuf.json_format import MessageToDict

        print(json.dumps(MessageToDict(stats, preserving_proto_field_name=True)))
        return 0
    figures = {
        "now": format_ms(stats.now_ms),
        "fired, not acked": f"{stats.unacked:,}",
        "writer queue": f"{stats.queued_ops:,} operations",
        "keys": ", ".join(f"{k}={v:,}" for k, v in sorted(stats.column_family_keys.items())),
        "server memory": f"{stats.rss_bytes / 2**20:,.0f} MiB RSS",
        "server CPU": f"{stats.cpu_seconds:,.1f} s",
        "data dir": f"{stats.data_dir_bytes / 2**20:,.1f} MiB",
        "clock steps": _clock_steps(stats),
    }
    for label, value in figures.items():
        print(f"{label:<18}{value}")
    return 0


def _clock_steps(stats) -> str:
    """Wall-clock steps the server saw (docs/engine.md, "Clock steps"), and the last."""
    text = f"{stats.clock_steps_forward} forward, {stats.clock_steps_backward} backward"
    if stats.clock_steps_forward or stats.clock_steps_backward:
        text += (
            f"; last {stats.last_clock_step_ms:+,} ms, to {format_ms(stats.last_clock_step_at_ms)}"
        )
    return text


def _list(client, args: argparse.Namespace) -> int:
    try:
        from_ms = parse_time_ms(args.from_, "--from")
        to_ms = parse_time_ms(args.to, "--to")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    token = args.page_token
    count = 0
    if not args.json:
        print(f"{'DELIVER_AT (UTC)':<30}{'MESSAGE_ID':<36}{'WHEEL':<8}STATE")
    while True:
        page, token = client.list(args.topic, from_ms, to_ms, args.limit, token)
        for message in page:
            count += 1
            if args.json:
                print(json.dumps(message_dict(message, include_body=False)))
            else:
                state = State(message.state).name
                print(
                    f"{format_ms(message.deliver_at_ms):<30}{message.message_id:<36}"
                    f"{message.wheel:<8}{state}"
                )
        if not token or not args.all:
            break
    if token:
        print(f"more timers: add --page-token {token} (or --all)", file=sys.stderr)
    elif not args.json:
        print(f"{count} timer(s)", file=sys.stderr)
    return 0


# == helpers ================================================================================
def parse_time_ms(text: str, name: str) -> int:
    """Epoch ms (`1767225600000`), `now`, `+5m` from now, or ISO 8601 (UTC if no zone)."""
    cleaned = text.strip()
    now_ms = datetime.now(UTC).timestamp() * 1000
    if cleaned == "now":
        return int(now_ms)
    if cleaned.startswith("+"):
        return int(now_ms) + parse_duration_ms(cleaned[1:], name)
    if cleaned.isdigit():
        return int(cleaned)
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ValueError(
            f"{name}={text!r}: not a time; use epoch ms, now, +DURATION or ISO 8601"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def format_ms(epoch_ms: int) -> str:
    if not epoch_ms:
        return "-"
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def message_dict(message, include_body: bool) -> dict:
    """A TimerMessage for scripts: plain ints (not proto JSON's int64 strings)."""
    out = {
        "message_id": message.message_id,
        "topic": message.topic,
        "state": State(message.state).name,
        "wheel": message.wheel,
        "deliver_at_ms": message.deliver_at_ms,
        "created_at_ms": message.created_at_ms,
        "fired_at_ms": message.fired_at_ms,
        "acked_at_ms": message.acked_at_ms,
        "cancelled_at_ms": message.cancelled_at_ms,
        "properties": dict(message.properties),
    }
    if include_body:
        out["body_base64"] = base64.b64encode(message.body).decode()
        try:
            out["body"] = message.body.decode()
        except UnicodeDecodeError:
            out["body"] = None
    return out


def human_lines(message) -> list[tuple[str, str]]:
    state = State(message.state).name
    if message.wheel:
        state += f" (in the {message.wheel} wheel)"
    lines = [
        ("message_id", message.message_id),
        ("topic", message.topic),
        ("state", state),
        ("deliver_at", f"{format_ms(message.deliver_at_ms)}  ({message.deliver_at_ms} ms)"),
        ("created_at", format_ms(message.created_at_ms)),
        ("fired_at", format_ms(message.fired_at_ms)),
        ("acked_at", format_ms(message.acked_at_ms)),
        ("cancelled_at", format_ms(message.cancelled_at_ms)),
    ]
    props = ", ".join(f"{k}={v}" for k, v in sorted(message.properties.items()))
    lines.append(("properties", props or "-"))
    return lines


def _send_options(args: argparse.Namespace) -> dict[str, object]:
    """The SendRequest fields of --if-exists, --max-attempts, --dead-letter-topic and the
    repeat flags (--every / --cron with --tz, --until, --max-count, --missed)."""
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
