"""Benchmarks of the in-process engine (not tests): schedule rate, drain rate, RSS.

    python -m bench.engine_bench schedule --timers 1000000 --threads 4 --batch 1000
    python -m bench.engine_bench drain --timers 1000000
    python -m bench.engine_bench rss --timers 10000000
    python -m bench.engine_bench steady --rate 5000
    python -m bench.engine_bench burst --timers 1000000

Each prints one JSON line of figures. Real RocksDB in a temporary directory (removed
afterwards unless --keep); `sync_writes` is on unless --no-sync is given. schedule, drain
and rss run the real clock and writer thread (here); steady and burst run the engine in
virtual time (`bench.engine_virtual`); `python -m bench.instructions steady|burst ...`
counts the instructions of their measured part under valgrind, a figure the machine's
speed does not move.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import shutil
import tempfile
import threading
import time

import psutil

from bench.engine_virtual import bench_settings, burst, steady
from timerwheel.engine.engine import Engine
from timerwheel.engine.system_clock import SystemClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, SettingsError


def _engine(args, data_dir: str) -> Engine:
    return Engine(bench_settings(args, data_dir), SystemClock())


def _far_future_specs(count: int, body: bytes, rng: random.Random) -> list[SendSpec]:
    return [
        SendSpec("bench", body, When(WhenKind.DELAY, rng.randrange(HOUR_MS, 30 * DAY_MS)))
        for _ in range(count)
    ]


def schedule(args, data_dir: str) -> dict:
    """Producer threads call send_batch as fast as the engine acknowledges (durably)."""
    engine = _engine(args, data_dir)
    body = b"x" * args.body
    per_thread = args.timers // args.threads
    batches = [
        [
            _far_future_specs(args.batch, body, random.Random(t * 1000 + i))
            for i in range(per_thread // args.batch)
        ]
        for t in range(args.threads)
    ]  # built up front: the figure is the engine's, not the generator's
    # The pre-built input is the generator's, not the engine's: keep the cyclic garbage
    # collector from traversing its millions of objects on every collection the engine's
    # allocations trigger (that alone cost about 2 s of GIL time per million sends).
    gc.freeze()
    acknowledged = [0] * args.threads

    def produce(thread_index: int) -> None:
        for batch in batches[thread_index]:
            acknowledged[thread_index] += len(engine.send_batch(batch))  # durable on return

    cpu_start = psutil.Process().cpu_times()
    start = time.perf_counter()
    threads = [threading.Thread(target=produce, args=(t,)) for t in range(args.threads)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds = time.perf_counter() - start
    cpu_end = psutil.Process().cpu_times()
    gc.unfreeze()
    cpu_s = (cpu_end.user + cpu_end.system) - (cpu_start.user + cpu_start.system)
    sent = sum(acknowledged)
    engine.close()
    return {
        "bench": "schedule",
        "timers": sent,
        "seconds": round(seconds, 2),
        "timers_per_s": round(sent / seconds),
        "cpu_us_per_timer": round(cpu_s / sent * 1e6, 2),
        "cpu_cores_used": round(cpu_s / seconds, 2),
        "threads": args.threads,
        "batch": args.batch,
        "sync": not args.no_sync,
    }


def drain(args, data_dir: str) -> dict:
    """N timers due at the same instant (the worst hot second); how fast they all fire."""
    engine = _engine(args, data_dir)
    due_ms = SystemClock().now_ms() + args.lead_s * 1000
    due_ms -= due_ms % 1000
    first_id = None
    for start in range(0, args.timers, 10_000):
        count = min(10_000, args.timers - start)
        results = engine.send_batch(
            [
                SendSpec("hot", b"x" * args.body, When(WhenKind.DELIVER_AT, due_ms))
                for _ in range(count)
            ]
        )
        first_id = first_id or results[0].message_id
    sent_at = SystemClock().now_ms()
    # Where the hot second waits depends on where `due_ms` falls against the minute
    # boundary: in the minute wheel it must be cascaded first (the slower case).
    placed_in = engine.get(first_id).wheel
    if sent_at >= due_ms:
        raise SystemExit(
            f"sending took until {sent_at - due_ms} ms past the due second: raise --lead-s"
        )
    first_seq = engine.scheduler.state.fire_seq
    while engine.scheduler.state.fire_seq - first_seq < args.timers:
        time.sleep(0.01)  # a benchmark poll, not a test
    done_ms = SystemClock().now_ms()
    engine.close()
    seconds = (done_ms - due_ms) / 1000
    return {
        "bench": "drain",
        "timers": args.timers,
        "due_ms": due_ms,
        "placed_in": placed_in,
        "all_fired_after_s": round(seconds, 2),
        "timers_per_s": round(args.timers / seconds),
    }


def rss(args, data_dir: str) -> dict:
    """Fill N far-future timers; report the process RSS with them pending, and after reopen."""
    process = psutil.Process()
    engine = _engine(args, data_dir)
    rng = random.Random(2)
    body = b"x" * args.body
    start = time.perf_counter()
    peak = 0
    for done in range(0, args.timers, 10_000):
        engine.send_batch(_far_future_specs(min(10_000, args.timers - done), body, rng))
        if done % 1_000_000 == 0:
            peak = max(peak, process.memory_info().rss)
    fill_s = time.perf_counter() - start
    rss_filled = process.memory_info().rss
    engine.close()
    engine = _engine(args, data_dir)
    engine.send(SendSpec("bench", b"", When(WhenKind.DELAY, 1000)))
    rss_reopened = process.memory_info().rss
    engine.close()
    disk = sum(
        f.stat().st_size for f in __import__("pathlib").Path(data_dir).rglob("*") if f.is_file()
    )
    return {
        "bench": "rss",
        "timers": args.timers,
        "fill_s": round(fill_s, 1),
        "fill_timers_per_s": round(args.timers / fill_s),
        "rss_mb_filled": rss_filled // 2**20,
        "rss_mb_peak_during_fill": max(peak, rss_filled) // 2**20,
        "rss_mb_after_reopen": rss_reopened // 2**20,
        "disk_bytes_per_timer": round(disk / args.timers, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("bench", choices=["schedule", "drain", "rss", "steady", "burst"])
    parser.add_argument("--timers", type=int, default=1_000_000)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1_000)
    parser.add_argument("--body", type=int, default=100, help="body bytes per timer")
    parser.add_argument(
        "--lead-s",
        type=int,
        default=40,
        help="drain: seconds between the first send and the due second",
    )
    parser.add_argument("--rate", type=int, default=5_000, help="steady: sends a second")
    parser.add_argument("--min-delay-s", type=int, default=3, help="steady")
    parser.add_argument("--max-delay-s", type=int, default=6, help="steady")
    parser.add_argument("--ack-every-ms", type=int, default=10, help="steady")
    parser.add_argument("--warmup-s", type=int, default=10, help="steady: virtual seconds")
    parser.add_argument("--measure-s", type=int, default=20, help="steady: virtual seconds")
    parser.add_argument(
        "--retention-s", type=int, default=0,
        help="steady: retention of acked messages (default: the Settings default, 3 days)",
    )  # fmt: skip
    parser.add_argument(
        "--in-flight", type=int, default=20_000, help="burst: the consumer's window"
    )
    parser.add_argument(
        "--fire-first", action="store_true", help="burst: fire all before delivering"
    )
    parser.add_argument("--no-sync", action="store_true")
    parser.add_argument(
        "--delivery-traces", action="store_true",
        help="steady, burst: each delivery's DELIVERED event, as the server stores it",
    )  # fmt: skip
    parser.add_argument(
        "--set", dest="assignments", action="append", default=[], metavar="NAME=VALUE",
        help="a setting by its Settings name, as `timerwheel serve --set`",
    )  # fmt: skip
    parser.add_argument("--data-dir", help="default: a temporary directory")
    parser.add_argument("--keep", action="store_true")
    args = parser.parse_args()
    try:  # bad --set values: a usage error naming them, before anything is made
        bench_settings(args, "unused")
    except SettingsError as exc:
        parser.error(str(exc))
    data_dir = args.data_dir or tempfile.mkdtemp(prefix="timerwheel-bench-")
    try:
        print(
            json.dumps(
                {
                    "schedule": schedule,
                    "drain": drain,
                    "rss": rss,
                    "steady": steady,
                    "burst": burst,
                }[args.bench](args, data_dir)
            )
        )
    finally:
        if not args.keep:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
