"""Benchmarks of the in-process engine (not tests): schedule rate, drain rate, RSS.

    python -m bench.engine_bench schedule --timers 1000000 --threads 4 --batch 1000
    python -m bench.engine_bench drain --timers 1000000
    python -m bench.engine_bench rss --timers 10000000
    python -m bench.engine_bench steady --rate 5000
    python -m bench.engine_bench burst --timers 1000000

Each prints one JSON line of figures. Real RocksDB in a temporary directory (removed
afterwards unless --keep); `sync_writes` is on unless --no-sync is given. schedule, drain
and rss run the real clock and writer thread; steady and burst run the engine in virtual
time; `python -m bench.instructions steady|burst ...` counts the instructions of their
measured part under valgrind, a figure the machine's speed does not move.
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
from itertools import repeat

import psutil

from bench.instructions import collect
from cli.config import parse_assignment
from engine.engine import Engine
from engine.system_clock import SystemClock
from store import records
from wheels.clock import VirtualClock
from wheels.domain import SendSpec, When, WhenKind
from wheels.settings import DAY_MS, HOUR_MS, Settings, SettingsError
from wheels.trace import TraceKind


def _settings(args, data_dir: str, **given: object) -> Settings:
    """The engine's settings: --no-sync, then each `--set NAME=VALUE` (as `serve --set`)."""
    chosen = dict(parse_assignment(text) for text in args.assignments)
    return Settings(data_dir=data_dir, sync_writes=not args.no_sync, **given, **chosen)


def _engine(args, data_dir: str) -> Engine:
    return Engine(_settings(args, data_dir), SystemClock())


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


def steady(args, data_dir: str) -> dict:
    """The engine's own CPU a message at a steady `--rate`, in virtual time: no gRPC, no
    threads, no waiting, so the figure is the engine's work alone and repeats to a few
    percent on a noisy machine (a loadtest's server CPU varies by 10-20%).

    The shape of `loadtest --scenario tdmq`: a SendBatch of rate/50 messages every 20 ms,
    one writer iteration (the fire commit) every fire tick, and a consumer that every
    `--ack-every-ms` reads what fired (`fetch_deliveries`, what the dispatchers call) and
    acks it in one call, each send and ack its own group commit as in the server. Delays
    are uniform in [--min-delay-s, --max-delay-s]. After `--warmup-s` of virtual time
    (the fires reach the send rate once the longest delay has passed), `--measure-s` are
    measured: the process CPU over the messages acked in them. The specs are built before
    the clock starts: their building is the producer's, not the engine's. With
    `--retention-s` shorter than the warm-up, the retention sweep (which removes acked
    messages once their retention ends, 3 days by default) runs at the ack rate in the
    measured window too, as in a server that has run longer than its retention.
    """
    clock = VirtualClock()
    retention = {"retention_ms": args.retention_s * 1000} if args.retention_s else {}
    settings = _settings(args, data_dir, **retention)
    engine = Engine(settings, clock, background=False)
    rng = random.Random(5)
    body = b"x" * args.body
    per_send, send_every_ms, tick_ms = args.rate * 20 // 1000, 20, settings.fire_tick_ms
    ticks = (args.warmup_s + args.measure_s) * 1000 // tick_ms
    sends = [
        [
            SendSpec("steady", body, When(WhenKind.DELAY, rng.randrange(
                args.min_delay_s * 1000, args.max_delay_s * 1000 + 1)))
            for _ in range(per_send)
        ]
        for _ in range(ticks * tick_ms // send_every_ms + 1)
    ]  # fmt: skip
    gc.freeze()  # the pre-built specs are the generator's: see `schedule`
    after_seq, acked, commits, elapsed_ms = 0, 0, 0, 0
    next_send_ms, next_ack_ms, measure_from_ms = 0, 0, args.warmup_s * 1000
    cpu_start = acked_start = commits_start = None
    for _ in range(ticks):
        clock.advance(tick_ms)
        elapsed_ms += tick_ms
        if cpu_start is None and elapsed_ms > measure_from_ms:
            collect(True)
            cpu_start, acked_start, commits_start = time.process_time(), acked, commits
        if elapsed_ms >= next_send_ms:
            engine.send_batch(sends[next_send_ms // send_every_ms])
            next_send_ms += send_every_ms
            commits += 1
        while engine.step():
            commits += 1
        commits += 1
        if elapsed_ms >= next_ack_ms:
            fired = engine.fetch_deliveries("steady", after_seq, 100_000)
            if fired:
                after_seq = fired[-1].seq
                trailers = _note_deliveries(args, engine, fired)
                acked += _ack(engine, "steady", [f.message_id for f in fired], trailers)
                commits += 1
            next_ack_ms += args.ack_every_ms
    cpu_s = time.process_time() - cpu_start
    collect(False)
    gc.unfreeze()
    engine.close()
    messages = acked - acked_start
    return {
        "bench": "steady",
        "rate": args.rate,
        "delays_s": [args.min_delay_s, args.max_delay_s],
        "fire_tick_ms": tick_ms,
        "measured_s": args.measure_s,
        "messages_acked": messages,
        "group_commits_per_s": round((commits - commits_start) / args.measure_s),
        "cpu_us_per_message": round(cpu_s / messages * 1e6, 1),
        "cpu_percent_of_a_core": round(cpu_s / args.measure_s * 100, 1),
        "sync": not args.no_sync,
        "delivery_traces": args.delivery_traces,
        "retention_ms": settings.retention_ms,
    }


DELIVERED = int(TraceKind.DELIVERED)


def _note_deliveries(args, engine: Engine, fired: list) -> dict[str, bytes]:
    """With `--delivery-traces`, each delivered message's DELIVERED event (attempt 1) as
    the delivery process hands it over (`server.delivery_trace`), one group a
    DeliveryBatch (`delivery_batch_max` messages): by default held for the Ack, so the
    returned trailers go with the ack calls (`_ack`; server.first_deliveries); with
    `--set first_delivery_hold_ms=0` handed over at once, staged with the next commit."""
    if not args.delivery_traces:
        return {}
    ids, size = [f.message_id for f in fired], engine.settings.delivery_batch_max
    batches = [ids[first : first + size] for first in range(0, len(ids), size)]
    if engine.settings.first_delivery_hold_ms:
        trailers: dict[str, bytes] = {}
        for batch in batches:
            trailer = records.first_delivery_trailer(engine.now_ms(), "bench")
            trailers.update(zip(batch, repeat(trailer)))
        return trailers
    engine.record_trace([(DELIVERED, "bench", batch, [1] * len(batch)) for batch in batches])
    return {}


def _ack(engine: Engine, topic: str, ids: list[str], trailers: dict[str, bytes]) -> int:
    """An ack call, with the first deliveries held for it (`_note_deliveries`)."""
    first_deliveries = list(map(trailers.pop, ids)) if trailers else None
    return len(engine.ack(topic, ids, first_deliveries))


def burst(args, data_dir: str) -> dict:
    """`loadtest --scenario burst` for the engine alone, in virtual time: N timers due
    uniformly in one second; once the second opens, each 4 ms tick runs one writer
    iteration (a group commit with a fire chunk of at most `fire_chunk`), then a consumer
    reads what fired (`fetch_deliveries`, at most `--in-flight`, the loadtest's window)
    and acks it in calls of at most 10,000 ids, as the loadtest's consumer does. The
    figures are the process CPU of each kind of call until every timer is acked: the
    engine's own floor for the burst, with no gRPC, delivery process or consumer beside
    it. As in the server, every group commit fires what is due, an ack call's too, so
    `ack_calls` includes fire chunks. `--fire-first` fires the whole burst before the
    consumer starts (as when delivery falls behind the fires): the fired cache then holds
    only the last of them and the rest is read back from RocksDB.
    """
    clock = VirtualClock()
    engine = Engine(_settings(args, data_dir), clock, background=False)
    rng = random.Random(7)
    opens_ms = clock.now_ms() + args.lead_s * 1000
    opens_ms -= opens_ms % 1000
    for start in range(0, args.timers, 10_000):
        due = [opens_ms + rng.randrange(1000) for _ in range(min(10_000, args.timers - start))]
        engine.send_batch(
            [SendSpec("burst", b"x" * args.body, When(WhenKind.DELIVER_AT, t)) for t in due]
        )
    while clock.now_ms() < opens_ms:  # the cascades down to the second wheel, not measured
        clock.advance(min(1000, opens_ms - clock.now_ms()))
        engine.run_until_idle()
    cpu = {"writer_steps": 0.0, "fetches": 0.0, "ack_calls": 0.0}
    after_seq, acked, ticks = 0, 0, 0
    gc.freeze()
    collect(True)
    while acked < args.timers:
        clock.advance(4)
        ticks += 1
        started = time.process_time()
        if args.fire_first:
            engine.run_until_idle()
        else:
            engine.step()
        fired = time.process_time()
        cpu["writer_steps"] += fired - started
        if args.fire_first and clock.now_ms() < opens_ms + 1000:
            continue
        batch = engine.fetch_deliveries("burst", after_seq, args.in_flight)
        trailers = _note_deliveries(args, engine, batch)
        fetched = time.process_time()
        cpu["fetches"] += fetched - fired
        ids = [f.message_id for f in batch]
        for first in range(0, len(ids), 10_000):
            acked += _ack(engine, "burst", ids[first : first + 10_000], trailers)
        cpu["ack_calls"] += time.process_time() - fetched
        if batch:
            after_seq = batch[-1].seq
    collect(False)
    gc.unfreeze()
    # What the last timer's trace holds, as `Get` shows it: with --delivery-traces, its
    # delivery too (outside the measured part).
    last = engine.get(ids[-1], include_trace=True)
    engine.close()
    total = sum(cpu.values())
    return {
        "bench": "burst",
        "timers": args.timers,
        "fire_first": args.fire_first,
        "in_flight": args.in_flight,
        "virtual_s_until_all_acked": round(ticks * 4 / 1000, 1),
        "cpu_s": round(total, 2),
        # Milliseconds: a small run's fetches (records handed on undecoded) take about one.
        "cpu_s_by_part": {part: round(seconds, 3) for part, seconds in cpu.items()},
        "cpu_us_per_timer": round(total / args.timers * 1e6, 1),
        "sync": not args.no_sync,
        "delivery_traces": args.delivery_traces,
        "last_trace": [event.kind.name for event in last.trace],
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
        _settings(args, "unused")
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
