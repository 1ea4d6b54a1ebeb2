"""`timerwheel loadtest`: run a load-test scenario and print TDMQ's table for timerwheel.

    timerwheel loadtest --scenario smoke
    timerwheel loadtest --scenario tdmq --delay-scale 0.1 --json tdmq.json
    timerwheel loadtest --scenario smoke --duration 10s --delay-min 1s --delay-max 30s --grace 2s
    timerwheel loadtest --scenario burst --count 1000000 --rate 60000
    timerwheel loadtest --scenario cancel --cancel-share 0.5
    timerwheel loadtest --scenario backlog --count 10000000
    timerwheel loadtest --scenario tdmq --target 127.0.0.1:7070   # a running server
    timerwheel loadtest --scenario smoke --target HOST:PORT --tls-ca ca.pem --token-file admin.token
    timerwheel loadtest --scenario failover --target 127.0.0.1:7071,127.0.0.1:7072,127.0.0.1:7073 \
        --fault 'kill -9 $(cat /tmp/tw/n2.pid)' --fault-at 20s

Without --target a server is spawned (`timerwheel serve` on a temporary data dir,
127.0.0.1, port 0) and always stopped afterwards; --serve-flag passes flags to it, e.g.
--serve-flag=--no-sync. The Markdown table goes to stdout, the progress bar to stderr.
Exit status: 0 when the accounting holds (nothing lost, nothing early, no cancelled
timer delivered, sent = acked + cancelled), 1 when it does not, 2 on a usage error.
The failover scenario runs against a cluster the user started: --target lists every
node (at least two), --fault is the shell command that makes the fault, run --fault-at
after the start (default 20s); it prints the fault suite's table (docs/cluster.md).
Every duration flag needs its unit, as everywhere in timerwheel (`--duration 10s`,
`--grace 500ms`): a bare `--duration 10` is refused, naming the flag and the fix.
SIGTERM ends a run as Ctrl-C does (exit status 143): the producers, the consumers and
the spawned server are stopped and its data dir is removed.
"""

from __future__ import annotations

import argparse
import ipaddress
import sys

from timerwheel.cli.connection import add_connection_flags, connection_from_args
from timerwheel.durations import parse_duration_ms
from timerwheel.loadtest.scenarios import SCENARIOS, ScenarioError, scenario

# flag -> (Scenario field, type, help); durations are in DURATIONS
OVERRIDES = {
    "--rate": ("rate", int, "messages per second, all producers together"),
    "--count": ("count", int, "messages in all (sets the duration from the rate)"),
    "--batch": ("batch", int, "messages per request (1: unary Send, else SendBatch)"),
    "--producers": ("producers", int, "producer processes"),
    "--producer-threads": (
        "producer_threads",
        int,
        "threads per producer, each send()ing single messages through the batching "
        "producer (TDMQ's shape; needs --batch 1)",
    ),
    "--connections": (
        "connections",
        int,
        "gRPC connections per producer process, requests round-robin over them (with "
        "--serve-flag=--workers=N each connection is served by one worker)",
    ),
    "--consumers": ("consumers", int, "consumer processes"),
    "--topics": ("topics", int, "topics the messages are spread over"),
    "--body-bytes": ("body_bytes", int, "bytes per message body (at least 10)"),
    "--delay-scale": ("delay_scale", float, "multiplies the delay range (0.1: tdmq in 3 s..60 s)"),
    "--cancel-share": ("cancel_share", float, "share of timers cancelled after their send"),
    "--max-outstanding": ("max_outstanding", int, "unanswered requests per producer"),
    "--max-in-flight": ("max_in_flight", int, "un-acked deliveries per Subscribe stream"),
}
# Duration flags: flag -> (Scenario field, help). Each needs its unit (`--grace 500ms`,
# `--duration 10s`), parsed by timerwheel.durations; a bare number is refused.
DURATIONS = {
    "--duration": ("duration_s", "length of the send phase, e.g. 10s or 2m"),
    "--delay-min": ("delay_min_ms", "shortest delay before the scale, e.g. 200ms"),
    "--delay-max": ("delay_max_ms", "longest delay before the scale, e.g. 30s"),
    "--burst-window": ("burst_window_ms", "burst: the window every timer is due in, e.g. 1s"),
    "--burst-lead": ("burst_lead_ms", "burst: the window opens this long after sending, e.g. 10s"),
    "--ack-linger": (
        "ack_linger_ms",
        "consumers gather acks this long before an Ack call, one call at a time (default 10ms)",
    ),
    "--send-overrun": (
        "send_overrun_ms",
        "producers still behind this long after the planned send phase are stopped and the "
        "run fails (default 90s; backlog 10m)",
    ),
    "--grace": ("grace_ms", "wait after the last deliver time before accounting, e.g. 2s"),
    "--drain-timeout": ("drain_timeout_ms", "longest wait for stragglers, e.g. 60s"),
}
# The flags' earlier names, in bare milliseconds: refused with the new spelling.
RENAMED = {f"{flag}-ms": flag for flag in DURATIONS if flag != "--duration"}


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "loadtest",
        help="load-test a server (spawned, or --target) and print the benchmark table",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--scenario", required=True, choices=sorted([*SCENARIOS, "failover"]))
    parser.add_argument(
        "--target", metavar="HOST:PORT",
        help="a running server (loopback); failover: every node, HOST:PORT,HOST:PORT[,...]",
    )  # fmt: skip
    parser.add_argument(
        "--fault", metavar="COMMAND",
        help="failover: the shell command that makes the fault, e.g. 'kill -9 $(cat n2.pid)'",
    )  # fmt: skip
    parser.add_argument(
        "--fault-at", metavar="DURATION",
        help="failover: run --fault this long after the start (default 20s)",
    )  # fmt: skip
    parser.add_argument("--spawn", action="store_true", help="spawn a server (the default)")
    parser.add_argument(
        "--serve-flag", action="append", default=[], metavar="FLAG",
        help="a flag for the spawned server, e.g. --serve-flag=--no-sync (repeatable)",
    )  # fmt: skip
    parser.add_argument(
        "--allow-remote", action="store_true",
        help="allow a --target that is not a loopback address (refused by default)",
    )  # fmt: skip
    parser.add_argument("--keep-data", action="store_true", help="keep the spawned data dir")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    for flag, (name, kind, text) in OVERRIDES.items():
        parser.add_argument(flag, dest=name, type=kind, help=text)
    for flag, (name, text) in DURATIONS.items():
        parser.add_argument(flag, dest=name, metavar="DURATION", help=text)
    for old in RENAMED:
        parser.add_argument(old, dest=f"renamed_{old[2:]}", help=argparse.SUPPRESS)
    add_connection_flags(parser)  # for --target: the token needs role admin
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.spawn and args.target:
        print("timerwheel loadtest: give --spawn or --target, not both", file=sys.stderr)
        return 2
    if args.scenario == "failover":
        from timerwheel.cli.loadtest_failover import run_failover

        return run_failover(args)
    if args.fault is not None or args.fault_at is not None:
        print("timerwheel loadtest: --fault and --fault-at are for --scenario failover",
              file=sys.stderr)  # fmt: skip
        return 2
    if args.target and "," in args.target:
        print(
            f"timerwheel loadtest: --target {args.target}: several nodes are for "
            "--scenario failover; give one HOST:PORT",
            file=sys.stderr,
        )
        return 2
    if args.target and not args.allow_remote and not is_loopback(args.target):
        print(
            f"timerwheel loadtest: --target {args.target}: not a loopback address "
            "(give --allow-remote to load-test another machine)",
            file=sys.stderr,
        )
        return 2
    try:
        chosen = scenario(args.scenario).with_overrides(
            **{name: getattr(args, name) for name, _, _ in OVERRIDES.values()},
            **duration_overrides(args),
        )
        connection = connection_from_args(args)
    except (ScenarioError, ValueError) as exc:
        print(f"timerwheel loadtest: {exc}", file=sys.stderr)
        return 2
    from timerwheel.loadtest import harness, report  # heavy imports after the cheap checks
    from timerwheel.loadtest.stopping import unwind_on_sigterm
    from timerwheel.observability.log_config import configure_logging

    configure_logging("warning", "console", sys.stderr)  # stdout carries the report only

    try:
        with unwind_on_sigterm("timerwheel loadtest"):
            fig = harness.run(
                chosen, target=args.target, serve_flags=args.serve_flag,
                keep_data=args.keep_data, progress=not args.no_progress, connection=connection,
            )  # fmt: skip
    except (RuntimeError, TimeoutError, OSError) as exc:  # the harness itself could not run
        print(f"timerwheel loadtest: {exc}", file=sys.stderr)
        return 1
    print(report.markdown(fig))
    if args.json:
        with open(args.json, "w") as out:
            out.write(report.to_json(fig) + "\n")
    return 0 if fig["ok"] else 1


def duration_overrides(args: argparse.Namespace) -> dict[str, float | int | None]:
    """The Scenario fields of the duration flags: ms, or seconds for `duration_s`. A bare
    number (`--duration 10`), a negative one or a flag's old `-ms` name is a ValueError that
    names the flag and the fix."""
    for old, new in RENAMED.items():
        value = getattr(args, f"renamed_{old[2:]}", None)
        if value is not None:
            example = f"{value}ms" if value.strip().isdigit() else "500ms"
            raise ValueError(f"{old} is now {new} with a unit, e.g. {new} {example}")
    fields: dict[str, float | int | None] = {}
    for flag, (name, _) in DURATIONS.items():
        value = getattr(args, name, None)  # a parser may take some of them only
        if value is None:
            fields[name] = None
            continue
        ms = parse_duration_ms(value, flag)
        fields[name] = ms / 1000 if name == "duration_s" else ms
    return fields


def is_loopback(target: str) -> bool:
    """Whether HOST:PORT names this machine's loopback (localhost, 127.0.0.0/8, [::1])."""
    host = target.rsplit(":", 1)[0].strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
