"""The engine benches in virtual time: `steady` (TDMQ's shape at a rate) and `burst`.

    python -m bench.engine_bench steady --rate 5000
    python -m bench.engine_bench burst --timers 1000000

The engine runs with `background=False` and a `VirtualClock`: each writer iteration is a
call here, time moves only when the bench moves it, and nothing waits, so the CPU a figure
reports is the engine's work alone (no gRPC, no harness). `python -m bench.instructions
steady|burst ...` counts the instructions of their measured part, between `collect(True)`
and `collect(False)`. `bench.engine_bench` parses the arguments and runs the real-clock
benches beside these.
"""

from __future__ import annotations

import gc
import random
import time
from itertools import repeat

from bench.instructions import collect
from timerwheel.cli.config import parse_assignment
from timerwheel.engine.engine import Engine
from timerwheel.store import records
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.trace import TraceKind


def bench_settings(args, data_dir: str, **given: object) -> Settings:
    """The engine's settings: --no-sync, then each `--set NAME=VALUE` (as `serve --set`)."""
    chosen = dict(parse_assignment(text) for text in args.assignments)
    return Settings(data_dir=data_dir, sync_writes=not args.no_sync, **given, **chosen)


def steady(args, data_dir: str) -> dict:
    """The engine's own CPU a message at a steady `--rate`, in virtual time: no gRPC, no
    threads, no waiting, so the figure is the engine's work alone and repeats to a few
    percent on a noisy machine (a loadtest's server CPU varies by a tenth or more).

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
    settings = bench_settings(args, data_dir, **retention)
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
    the delivery process hands it over (`timerwheel.delivery.trace`), one group a
    DeliveryBatch (`delivery_batch_max` messages): by default held for the Ack, so the
    returned trailers go with the ack calls (`_ack`; timerwheel.delivery.first_deliveries); with
    `--set first_delivery_hold_ms=0s` handed over at once, staged with the next commit."""
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
    engine = Engine(bench_settings(args, data_dir), clock, background=False)
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
