"""`timerwheel get | cancel | list | stats`: look at and cancel a running server's timers.

    timerwheel get MESSAGE_ID [--json] [--body] [--trace]            # --body: only the body
    timerwheel cancel MESSAGE_ID
    timerwheel list --topic orders [--from +0s] [--to +1h] [--limit 100] [--all] [--json]
    timerwheel stats [--json]

--target, the TLS and token flags and the exit codes are every client command's
(timerwheel.cli.client_command).
"""

from __future__ import annotations

import argparse
import base64
import json
import sys

from timerwheel.cli.client_command import add_client_parser, time_range_ms
from timerwheel.cli.times import format_ms
from timerwheel.common import State


def register(subparsers: argparse._SubParsersAction) -> None:
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


def _get(client, args: argparse.Namespace) -> int:
    from timerwheel.observability.trace_view import (  # protos: only when a command runs
        trace_dicts,
        trace_lines,
    )

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


# Topics per page for the totals: the server's largest, so a server with many topics
# takes few calls.
TOPICS_PAGE = 10_000


def _stats(client, args: argparse.Namespace) -> int:
    """The totals first (what an operator asks before anything else: how many timers
    wait, how many fired ones wait for an ack, over how many topics), then the server's
    counters. Pending is the sum of Topics' exact per-topic counts over every page:
    Stats has only RocksDB's key estimates per wheel."""
    stats = client.stats()
    pending = topics = 0
    token = ""
    while True:
        page = client.topics_page(TOPICS_PAGE, token)
        pending += sum(t.pending for t in page.topics)
        topics += len(page.topics)
        token = page.next_page_token
        if not token:
            break
    totals = {"pending": pending, "fired_unacked": stats.unacked, "topics": topics}
    if args.json:
        from google.protobuf.json_format import MessageToDict

        figures = MessageToDict(stats, preserving_proto_field_name=True)
        print(json.dumps({"totals": totals, **figures}))
        return 0
    figures = {
        "pending": f"{totals['pending']:,} timers",
        "fired, not acked": f"{totals['fired_unacked']:,}",
        "topics": f"{totals['topics']:,}",
        "now": format_ms(stats.now_ms),
        "writer queue": f"{stats.queued_ops:,} operations",
        "keys": ", ".join(f"{k}={v:,}" for k, v in sorted(stats.column_family_keys.items())),
        "server memory": f"{stats.rss_bytes / 2**20:,.0f} MiB RSS",
        "server CPU": f"{stats.cpu_seconds:,.1f} s",
        "CPU by thread": _by_thread(stats.thread_cpu_seconds),
        "data dir": f"{stats.data_dir_bytes / 2**20:,.1f} MiB",
        "clock steps": _clock_steps(stats),
    }
    for label, value in figures.items():
        print(f"{label:<18}{value}")
    if stats.HasField("cluster"):
        _print_cluster(stats.cluster)
    return 0


def _print_cluster(cluster) -> None:
    """Cluster mode: this node, then every partition's owner and epoch as it sees them."""
    owned = f" ({', '.join(map(str, cluster.owned))})" if cluster.owned else ""
    print(f"{'cluster node':<18}{cluster.node} ({cluster.holder}) at {cluster.address}")
    print(f"{'live nodes':<18}{', '.join(cluster.live_nodes)}")
    print(
        f"{'owns':<18}{len(cluster.owned)} of {cluster.partitions} partitions{owned}; delivering: "
        f"{'yes' if cluster.delivering else 'no'}; takeovers: {cluster.takeovers}"
    )
    print(
        f"{'partition':>9}  {'owner':<24}{'address':<22}{'epoch':>8}  {'here':<8}{'last seq':>9}"
        f"  {'stream leader':<14}{'current':>7}{'lag':>7}"
    )
    for row in cluster.map:
        # replication is read by the owner only: blank on the rows of other nodes' partitions
        read = bool(row.stream_leader or row.replicas_current)
        print(
            f"{row.partition:>9}  {row.owner or '-':<24}{row.address or '-':<22}{row.epoch:>8}  "
            f"{row.verdict:<8}{row.last_sequence or '':>9}  {row.stream_leader or '':<14}"
            f"{row.replicas_current if read else '':>7}{row.replica_lag if read else '':>7}"
        )
    standing = [r for r in cluster.map if r.standby_sequence or r.standby_lag]
    if standing:  # the partitions this node keeps warm, and how far behind their streams
        print(f"{'standby of':<18}" + "; ".join(
            f"p{r.partition} through {r.standby_sequence} (lag {r.standby_lag})" for r in standing
        ))  # fmt: skip
    snapped = [r for r in cluster.map if r.snapshot_sequence]
    if snapped:  # owned partitions' latest snapshots
        print(f"{'snapshots':<18}" + "; ".join(
            f"p{r.partition} through {r.snapshot_sequence}, {r.snapshot_age_ms / 1000:,.0f} s old"
            for r in snapped
        ))  # fmt: skip


def _by_thread(seconds: dict[str, float]) -> str:
    """The engine process's CPU by kind of thread: the writer first (the thread that
    does every write), then every other kind that used any, largest first."""
    others = sorted(((s, k) for k, s in seconds.items() if k != "writer" and s > 0), reverse=True)
    return ", ".join(
        f"{kind} {s:,.1f} s" for s, kind in [(seconds.get("writer", 0.0), "writer"), *others]
    )


def _clock_steps(stats) -> str:
    """Wall-clock steps the server saw (docs/engine.md, "Clock steps"), and the last."""
    text = f"{stats.clock_steps_forward} forward, {stats.clock_steps_backward} backward"
    if stats.clock_steps_forward or stats.clock_steps_backward:
        text += (
            f"; last {stats.last_clock_step_ms:+,} ms, to {format_ms(stats.last_clock_step_at_ms)}"
        )
    return text


def _list(client, args: argparse.Namespace) -> int:
    from_ms, to_ms = time_range_ms(args)
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
def message_dict(message, include_body: bool) -> dict:
    """A TimerMessage for scripts: plain ints (not proto JSON's int64 strings); a series
    adds its `repeat` and `next_occurrence` (both None otherwise)."""
    from timerwheel.observability.trace_view import schedule_dict  # protos: when a command runs

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
        **schedule_dict(getattr(message, "proto", message)),
    }
    if include_body:
        out["body_base64"] = base64.b64encode(message.body).decode()
        try:
            out["body"] = message.body.decode()
        except UnicodeDecodeError:
            out["body"] = None
    return out


def human_lines(message) -> list[tuple[str, str]]:
    from timerwheel.observability.trace_view import (  # protos: only when a command runs
        is_series,
        next_occurrence_text,
        schedule_text,
    )

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
    proto = getattr(message, "proto", message)
    if is_series(proto):  # a series: what it repeats on and which occurrence comes next
        lines.append(("schedule", schedule_text(proto.repeat, format_ms)))
        lines.append(("next", next_occurrence_text(proto, format_ms)))
    props = ", ".join(f"{k}={v}" for k, v in sorted(message.properties.items()))
    lines.append(("properties", props or "-"))
    return lines
