"""What every `timerwheel` command that talks to a running server shares.

`add_client_parser` gives a sub-command --target HOST:PORT (default $TIMERWHEEL_TARGET or
127.0.0.1:7070; a bare HOST gets port 7070), --timeout, and for a secured server
--tls-ca FILE [--tls-cert FILE --tls-key FILE] and --token-file FILE (or
$TIMERWHEEL_TOKEN; see timerwheel.cli.connection and docs/security.md). Its command then runs with
a connected client, and errors become exit codes with one clear line: 0 done, 1 refused
by the server (not found, bad input, unreachable: the message says which), 2 bad
command line (a command raises `UsageError` for those).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable

from timerwheel.cli.connection import add_connection_flags, connection_from_args
from timerwheel.cli.times import parse_time_ms
from timerwheel.durations import parse_duration_ms

DEFAULT_TARGET = "127.0.0.1:7070"


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
    parser.add_argument(
        "--timeout", default="10s", metavar="DURATION",
        help="longest wait for each call, with its unit: 10s, 500ms, 2m (default 10s)",
    )  # fmt: skip
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
                args.target, timeout_s=call_timeout_s(args.timeout), tls=connection.tls,
                token=connection.token,
            )  # fmt: skip
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


def call_timeout_s(text: str) -> float:
    """--timeout as seconds: a duration with its unit (`10s`, `500ms`), more than zero.
    A bare `--timeout 5` is refused like every duration flag (`--timeout='5': give a
    unit, e.g. 5s or 5ms`)."""
    ms = parse_duration_ms(text, "--timeout")
    if ms <= 0:
        raise ValueError(f"--timeout={text!r}: must be more than 0, e.g. 10s")
    return ms / 1000


def time_range_ms(args: argparse.Namespace) -> tuple[int, int]:
    """--from and --to of a command (timerwheel.cli.times formats), as epoch ms; a bad one is a
    UsageError naming its flag."""
    try:
        return parse_time_ms(args.from_, "--from"), parse_time_ms(args.to, "--to")
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def _hint(exc, args: argparse.Namespace) -> str:
    import grpc

    if exc.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED):
        from timerwheel.types import with_default_port

        return f" (is `timerwheel serve` running at {with_default_port(args.target)}?)"
    return ""
