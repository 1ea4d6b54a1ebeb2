"""A soak: mixed load against `timerwheel serve --workers N` with a kill -9 every few minutes.

    python -m bench.soak --duration 30m --kill-every 3m
    python -m bench.soak --duration 2m --kill-every 30s --json soak.json   # a short look

What it runs, all on loopback, for `--duration`:

* sends with client ids (batches of 20, delays up to `--max-delay`), at `--rate` a second;
  a tenth of them cancelled right after, a tenth rescheduled;
* a few recurring series (every 2 s) on their own topic;
* one consumer a topic that nacks one delivery in fifty (redelivered by the retry policy);
* every `--kill-every`, SIGKILL of one process of the server, picked at random: the
  supervisor (the whole server dies; the soak starts it again on the same data dir and
  port), the engine, the delivery process or a gRPC worker (the supervisor restarts it).

What it reports (and exits 1 unless the first three are 0):

| figure | meaning |
|---|---|
| lost | acknowledged, never cancelled, never received by the end |
| early | received before its deliver time |
| cancelled yet delivered | Cancel answered CANCELLED, the message arrived anyway |
| RSS slope | MiB an hour of the server's processes (summed, and by process), fitted |
| | over the run's second half, so the start's warm-up does not count |
| RSS by process | each process's RSS a minute (`--json`): a killed process starts again |
| | low, so its curve, not the slope, says whether it grows towards a cap |

Sends whose outcome is unknown (the call failed in flight when a process died) are
neither lost nor counted as delivered: the producer does not know whether they are
stored. Not a test: it takes as long as it is told and is meant to run alone.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.soak_server import Server
from timerwheel.client import TimerClient
from timerwheel.common import State
from timerwheel.durations import duration_ms
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb

TOPIC = "soak"
SERIES_TOPIC = "soak-series"
SERIES = 5
SERIES_EVERY_MS = 2_000
BATCH = 20
DRAIN_S = 180.0
SAMPLE_S = 5.0
RSS_CURVE_EVERY = 12  # samples: a point a minute in the figures


@dataclass
class Ledger:
    """What the producer knows it stored, and what the consumers saw (under one lock)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    deliver_at: dict[str, int] = field(default_factory=dict)  # acknowledged sends
    unknown: set[str] = field(default_factory=set)  # send, cancel or reschedule in doubt
    cancelled: set[str] = field(default_factory=set)
    received: Counter = field(default_factory=Counter)
    early: list[tuple[str, int]] = field(default_factory=list)
    occurrences: dict[str, set[int]] = field(default_factory=dict)  # series -> n seen
    nacks: int = 0
    errors: Counter = field(default_factory=Counter)


def _produce(client: TimerClient, ledger: Ledger, args, stop: threading.Event) -> None:
    rng = random.Random(args.seed)
    max_delay_ms = duration_ms(args.max_delay, "--max-delay")
    period_s = BATCH / args.rate
    next_s = time.monotonic()
    n = 0
    while not stop.is_set():
        ids = [f"m{n + i}" for i in range(BATCH)]
        n += BATCH
        requests = [
            client.request(TOPIC, b"x" * 64, delay_ms=rng.randint(500, max_delay_ms), message_id=i)
            for i in ids
        ]
        try:
            results = client.send_batch(requests)
        except Exception as error:
            with ledger.lock:
                ledger.errors[f"send {_kind(error)}"] += 1
                if _in_doubt(error):  # maybe stored: neither lost nor expected
                    ledger.unknown.update(ids)
        else:
            with ledger.lock:
                for result in results:
                    ledger.deliver_at[result.message_id] = result.deliver_at_ms
            for message_id in ids:
                roll = rng.random()
                if roll < 0.1:
                    _cancel(client, ledger, message_id)
                elif roll < 0.2:
                    _reschedule(client, ledger, message_id, rng.randint(500, max_delay_ms))
        next_s += period_s
        stop.wait(max(0.0, next_s - time.monotonic()))


def _cancel(client: TimerClient, ledger: Ledger, message_id: str) -> None:
    try:
        state = client.cancel(message_id)
    except Exception as error:
        with ledger.lock:
            ledger.errors[f"cancel {_kind(error)}"] += 1
            if _in_doubt(error):
                ledger.unknown.add(message_id)
        return
    if state == State.CANCELLED:
        with ledger.lock:
            ledger.cancelled.add(message_id)


def _reschedule(client: TimerClient, ledger: Ledger, message_id: str, delay_ms: int) -> None:
    try:
        deliver_at_ms = client.reschedule(message_id, deliver_at_ms=_now_ms() + delay_ms)
    except Exception as error:  # FAILED_PRECONDITION: fired already, nothing changed
        with ledger.lock:
            ledger.errors[f"reschedule {_kind(error)}"] += 1
            if _in_doubt(error):
                ledger.unknown.add(message_id)
        return
    with ledger.lock:
        ledger.deliver_at[message_id] = deliver_at_ms


def _consume(target: str, topic: str, ledger: Ledger, seed: int, stop: threading.Event) -> None:
    rng = random.Random(seed)

    def handle(message) -> None:
        now_ms = _now_ms()
        with ledger.lock:
            if topic == SERIES_TOPIC:
                series, _, n = message.message_id.partition("#")
                ledger.occurrences.setdefault(series, set()).add(int(n))
            else:
                ledger.received[message.message_id] += 1
            if now_ms < message.deliver_at_ms:
                ledger.early.append((message.message_id, message.deliver_at_ms - now_ms))
            if rng.random() < 0.02:
                ledger.nacks += 1
                raise RuntimeError("soak: a nack on purpose")

    while not stop.is_set():
        try:
            with TimerClient(target, timeout_s=10) as client:
                client.consume(topic, handle, concurrency=2, stop=stop)
        except Exception as error:  # the server died under the stream: subscribe again
            with ledger.lock:
                ledger.errors[f"consume {_kind(error)}"] += 1
        stop.wait(0.5)  # back off before subscribing again, not a synchronisation


DOUBT = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.DEADLINE_EXCEEDED,
    grpc.StatusCode.UNKNOWN,
    grpc.StatusCode.INTERNAL,
    grpc.StatusCode.CANCELLED,
}


def _in_doubt(error: Exception) -> bool:
    """True when a failed call may still have taken effect (it died in flight)."""
    return not isinstance(error, RemoteError) or error.code in DOUBT


def _kind(error: Exception) -> str:
    return error.code.name if isinstance(error, RemoteError) else type(error).__name__


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _rss_slope_mib_per_hour(samples: list[tuple[float, int]]) -> float:
    """Least-squares slope over the second half of the samples."""
    half = samples[len(samples) // 2 :]
    if len(half) < 2:
        return 0.0
    xs = [t for t, _ in half]
    ys = [r / 2**20 for _, r in half]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return (
        0.0
        if den == 0
        else sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 3600
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--duration", default="30m")
    parser.add_argument("--kill-every", default="3m")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rate", type=int, default=200, help="sends a second")
    parser.add_argument("--max-delay", default="30s")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--json", help="write the figures here too")
    args = parser.parse_args(argv)
    duration_s = duration_ms(args.duration, "--duration") / 1000
    kill_every_s = duration_ms(args.kill_every, "--kill-every") / 1000
    rng = random.Random(args.seed)
    ledger = Ledger()
    stop_sending, stop_consuming = threading.Event(), threading.Event()
    rss: list[tuple[float, int]] = []
    rss_of: dict[str, list[tuple[float, int]]] = {}  # by process kind: where a slope comes from
    kills: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="timerwheel-soak-") as tmp:
        server = Server(Path(tmp), args.workers)
        server.start()
        client = TimerClient(server.target, timeout_s=10)
        threads: list[threading.Thread] = []
        try:
            for i in range(SERIES):
                client.send(
                    SERIES_TOPIC, b"s", message_id=f"series{i}",
                    repeat=pb.Repeat(every_ms=SERIES_EVERY_MS),
                )  # fmt: skip
            threads = [
                threading.Thread(target=_produce, args=(client, ledger, args, stop_sending)),
                threading.Thread(
                    target=_consume, args=(server.target, TOPIC, ledger, 1, stop_consuming)
                ),
                threading.Thread(
                    target=_consume, args=(server.target, SERIES_TOPIC, ledger, 2, stop_consuming)
                ),
            ]
            for thread in threads:
                thread.start()
            started = time.monotonic()
            next_kill = started + kill_every_s
            while (elapsed := time.monotonic() - started) < duration_s:
                by_process = server.rss_by_process()
                rss.append((elapsed, sum(by_process.values())))
                for name, value in by_process.items():
                    rss_of.setdefault(name, []).append((elapsed, value))
                if time.monotonic() >= next_kill:
                    victim = rng.choice(["supervisor", *sorted(server.children)])
                    began = time.monotonic()
                    server.kill(victim)
                    kills.append(
                        {
                            "at_s": round(elapsed, 1),
                            "victim": victim,
                            "back_s": round(time.monotonic() - began, 2),
                        }
                    )
                    print(
                        f"[{elapsed:7.1f} s] killed {victim}, back in {kills[-1]['back_s']} s",
                        flush=True,
                    )
                    next_kill += kill_every_s
                time.sleep(SAMPLE_S)  # the sampling period of RSS, not a synchronisation
            stop_sending.set()
            threads[0].join(timeout=60)
            figures = _drain_and_account(ledger, stop_consuming, rss, kills, duration_s)
            figures["rss_slope_mib_per_hour_by_process"] = {
                name: round(_rss_slope_mib_per_hour(samples), 1)
                for name, samples in sorted(rss_of.items())
            }
            # the curves themselves, a point a minute: a kill restarts a process (its RSS
            # drops), so a slope alone cannot tell growth towards a cap from a leak
            figures["rss_mib_by_process"] = {
                name: [[round(t), round(r / 2**20, 1)] for t, r in samples[::RSS_CURVE_EVERY]]
                for name, samples in sorted(rss_of.items())
            }
        finally:
            stop_sending.set()
            stop_consuming.set()
            for thread in threads:
                thread.join(timeout=30)
            client.close()
            server.stop()
    print(json.dumps(figures, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=2))
    return 0 if figures["lost"] == figures["early"] == figures["cancelled_delivered"] == 0 else 1


def _drain_and_account(ledger, stop_consuming, rss, kills, duration_s) -> dict:
    """Wait (bounded) until every acknowledged, uncancelled send was received, then count."""

    def missing() -> list[str]:
        with ledger.lock:
            return [
                i for i in ledger.deliver_at
                if i not in ledger.cancelled and i not in ledger.unknown and not ledger.received[i]
            ]  # fmt: skip

    deadline = time.monotonic() + DRAIN_S
    while missing() and time.monotonic() < deadline:
        time.sleep(1.0)  # polling the ledger with a deadline
    stop_consuming.set()
    lost = missing()
    with ledger.lock:
        cancelled_delivered = sorted(i for i in ledger.cancelled if ledger.received[i])
        return {
            "duration_s": duration_s,
            "acknowledged": len(ledger.deliver_at),
            "unknown": len(ledger.unknown),
            "cancelled": len(ledger.cancelled),
            "received": sum(1 for c in ledger.received.values() if c),
            "duplicates": sum(c - 1 for c in ledger.received.values() if c > 1),
            "nacks": ledger.nacks,  # each one redelivered: a duplicate by design
            "lost": len(lost),
            "lost_sample": lost[:10],
            "early": len(ledger.early),
            "early_sample": ledger.early[:10],
            "cancelled_delivered": len(cancelled_delivered),
            # per series: the highest occurrence delivered, and how many below it never came
            "series": {
                s: {"last": max(ns), "missing": max(ns) - len(ns)}
                for s, ns in sorted(ledger.occurrences.items())
            },
            "kills": kills,
            "errors": dict(ledger.errors),
            "rss_mib_first": round(rss[0][1] / 2**20, 1) if rss else 0,
            "rss_mib_last": round(rss[-1][1] / 2**20, 1) if rss else 0,
            "rss_mib_peak": round(max(r for _, r in rss) / 2**20, 1) if rss else 0,
            "rss_slope_mib_per_hour": round(_rss_slope_mib_per_hour(rss), 1),
        }


if __name__ == "__main__":
    sys.exit(main())
