"""The peer timerwheel is measured against: the classic Redis sorted-set delay queue.

    python -m bench.peer_redis --delay-scale 0.1                      # tdmq, 14,000/s, 60 s
    python -m bench.peer_redis --delay-scale 0.1 --rate 40000 --json /tmp/redis-40k.json
    python -m bench.peer_redis --scenario burst                       # 1,000,000 in one second
    python -m bench.peer_redis --scenario backlog                     # 10,000,000 far-future
    python -m bench.peer_redis --delay-scale 0.1 --batch 1 --rate 8000   # unary sends

The shapes are `timerwheel loadtest`'s own scenarios (`loadtest/scenarios.py`: rate,
count or duration, batch, producers, body size, deliver times), read from the same
presets and changed by the same flags, so a peer run is the loadtest's twin:

* tdmq (the default): open-loop producers (processes) send at a fixed rate in batches
  (one pipelined ZADD of `--batch` members a round trip; `--batch 1` is the unary shape),
  each message due after a uniform delay of 30 s..10 min times `--delay-scale`;
* burst: every message due inside one window (1 s) that opens `burst_lead_ms` after the
  last planned send; the figure is how long after the window opened the last one arrived;
* backlog: far-future messages (1..30 days), nothing due; the figures are Redis's memory
  (its peak RSS and `used_memory`) and disk (the AOF directory) a pending message.

One consumer pops due members and records the delay error (receive time minus deliver
time, first receipts) in an HDR histogram; it stops once it has every message sent, or
`drain_timeout_ms` after the last deliver time. The queue is one sorted set, score =
deliver time in ms, popped atomically by a Lua script (ZRANGEBYSCORE -inf now LIMIT +
ZREM), the way such queues are written; the consumer polls when nothing is due, waiting
until the earliest member is due but at most 1 ms.

The script starts its own `redis-server` (Debian's package) on 127.0.0.1, a free port, a
temporary directory, AOF on with `appendfsync everysec` (what the issue's Redis run used),
and stops it at the end, always: on SIGTERM too, and a SIGKILLed script's redis-server
gets SIGTERM from the kernel and its producers and consumer die with it. It prints one
JSON line (and writes it to --json): the achieved send rate, delay error
P50/P90/P99/P999/max, lost count, Redis's CPU and memory, and the loadtest's `timeline`
(per second of deliver time, the worst delay error and Redis's CPU then), so the two
tails can be set side by side in time.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import json
import multiprocessing as mp
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import psutil
from hdrh.histogram import HdrHistogram

from timerwheel.cli.commands.loadtest import DURATIONS, OVERRIDES, duration_overrides
from timerwheel.loadtest.figures import timeline
from timerwheel.loadtest.interpreter import interpreter
from timerwheel.loadtest.pacing import (
    DeliverTimes,
    Pacer,
    split_messages,
    use_measuring_switch_interval,
)
from timerwheel.loadtest.scenarios import Scenario, ScenarioError, scenario
from timerwheel.loadtest.server_proc import Sample, StatsSampler, machine_busy_s, vm_hwm_bytes
from timerwheel.loadtest.stopping import unwind_on_sigterm
from timerwheel.procs.lifecycle import die_with_parent, run_as_child_of

KEY = "delayq"
POP_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
"""
PEER_SCENARIOS = ("tdmq", "burst", "backlog")
POLL_MS = 1.0  # the consumer's longest sleep when nothing is due


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class RedisServer:
    """redis-server on loopback in a temp dir; stopped (and the dir removed) on exit."""

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="tw-peer-redis-")
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> RedisServer:
        import redis

        self.proc = subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--dir", self.dir,
             "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
             "--protected-mode", "yes"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
        )  # fmt: skip
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.__exit__()
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)  # polling a starting server: there is nothing to wait on
        return self

    def cpu_s(self) -> float:
        times = psutil.Process(self.proc.pid).cpu_times()
        return times.user + times.system

    def sample(self) -> Sample:
        """Its CPU and RSS now, as the loadtest samples a timerwheel server's."""
        rss = psutil.Process(self.proc.pid).memory_info().rss
        return Sample(
            time.monotonic(), time.time(), self.cpu_s(), rss, 0, {}, 0,
            machine_busy_s=machine_busy_s(),
        )  # fmt: skip

    def memory(self) -> dict:
        """What Redis holds now: its RSS and its allocator's `used_memory`, in bytes."""
        import redis

        used = redis.Redis(port=self.port).info("memory")["used_memory"]
        return {"rss_bytes": psutil.Process(self.proc.pid).memory_info().rss, "used_memory": used}

    def pending(self) -> int:
        """Members still in the queue (not popped by the consumer)."""
        import redis

        return redis.Redis(port=self.port).zcard(KEY)

    def peak_rss_bytes(self) -> int:
        return vm_hwm_bytes(self.proc.pid)

    def disk(self) -> dict:
        """The bytes of its directory: the AOF files, as written so far."""
        files = [path for path in Path(self.dir).rglob("*") if path.is_file()]
        return {"bytes": sum(path.stat().st_size for path in files), "files": len(files)}

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def produce(index: int, shape: Scenario, port: int, start_ns: int, start_wall_ms: int, results):
    import redis

    use_measuring_switch_interval()  # as the harness's processes (timerwheel.loadtest.pacing)
    client = redis.Redis(port=port)
    rng = random.Random(index)
    pacer = Pacer(start_ns, shape.rate, shape.batch, shape.producers, index)
    deliver = deliver_times(shape, start_wall_ms)
    pad = b"x" * max(shape.body_bytes - 40, 0)
    count = split_messages(shape.messages, shape.producers, index)
    sent, latest_ms = 0, 0
    for k, first in enumerate(range(0, count, shape.batch)):
        wait_s = (pacer.due_ns(k) - time.monotonic_ns()) / 1e9
        if wait_s > 0:
            time.sleep(wait_s)  # open-loop pacing to a fixed schedule
        now_ms = time.time_ns() // 1_000_000
        members = {}
        for seq in range(first, min(first + shape.batch, count)):
            deliver_ms = deliver.sample(rng, now_ms)
            latest_ms = max(latest_ms, deliver_ms)
            members[b"%d:%d:%d:" % (index, seq, deliver_ms) + pad] = deliver_ms
        client.zadd(KEY, members)
        sent += len(members)
    results.put(("producer", sent, latest_ms))


def deliver_times(shape: Scenario, start_wall_ms: int) -> DeliverTimes:
    """The scenario's deliver times: uniform delays, or one window after the send phase."""
    if shape.burst_window_ms:
        opens_ms = start_wall_ms + shape.burst_offset_ms
        return DeliverTimes(0, 0, opens_ms, shape.burst_window_ms)
    return DeliverTimes(*shape.scaled_delay_ms)


def consume(port: int, expected, stop, results) -> None:
    """Pop due members until every message sent is in (`expected`, set once the producers
    are done) or `stop` is set."""
    import redis

    use_measuring_switch_interval()
    client = redis.Redis(port=port)
    pop = client.register_script(POP_DUE)
    errors = HdrHistogram(1, 3_600_000, 3)
    worst: dict[int, int] = {}  # second of the deliver time (epoch) -> its worst error
    seen: set[bytes] = set()
    early, last_received_ms = 0, 0
    while not stop.is_set() and not 0 <= expected.value <= len(seen):
        now_ms = time.time_ns() // 1_000_000
        due = pop(keys=[KEY], args=[now_ms, 500])
        received_ms = time.time_ns() // 1_000_000
        for member in due:
            ident, _, rest = member.rpartition(b":")[0].rpartition(b":")
            deliver_ms = int(rest)
            if ident in seen:
                continue
            seen.add(ident)
            error = received_ms - deliver_ms
            early += error < 0
            errors.record_value(max(error, 1))
            second = deliver_ms // 1000
            if error > worst.get(second, -1):
                worst[second] = error
            last_received_ms = received_ms
        if not due:
            head = client.zrange(KEY, 0, 0, withscores=True)
            wait_ms = POLL_MS if not head else min(head[0][1] - now_ms, POLL_MS)
            if wait_ms > 0:
                stop.wait(wait_ms / 1000)
    results.put(("consumer", len(seen), early, last_received_ms, errors.encode(), worst))


@contextlib.contextmanager
def _killed_at_exit(workers: list):
    """Kill the worker processes still running when the block ends (an error, SIGTERM)."""
    try:
        yield
    finally:
        for process in workers:
            if process.is_alive():
                process.kill()
            process.join(timeout=10)


# The loadtest's flags that shape a run the peer can make too (the rest are gRPC's).
PEER_FLAGS = (
    "--rate", "--duration", "--count", "--delay-scale", "--producers", "--batch",
    "--body-bytes", "--burst-lead", "--drain-timeout",
)  # fmt: skip


def parse_shape() -> tuple[Scenario, str | None]:
    """The scenario preset changed by the flags given (the loadtest's own), and --json."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", choices=PEER_SCENARIOS, default="tdmq")
    for flag in PEER_FLAGS:
        if flag in DURATIONS:  # with its unit, as the loadtest takes it (`--duration 10s`)
            name, text = DURATIONS[flag]
            parser.add_argument(flag, dest=name, metavar="DURATION", help=text)
            continue
        name, kind, text = OVERRIDES[flag]
        parser.add_argument(flag, dest=name, type=kind, help=text)
    parser.add_argument("--json", help="also write the figures here")
    parsed = parser.parse_args()
    args = vars(parsed)
    preset, json_path = scenario(args.pop("scenario")), args.pop("json")
    try:
        args.update(duration_overrides(parsed))
        return preset.with_overrides(**args), json_path
    except (ScenarioError, ValueError) as exc:
        parser.error(str(exc))


def main() -> None:
    shape, json_path = parse_shape()
    load_before = os.getloadavg()
    ctx = mp.get_context("spawn")
    workers: list = []
    with (
        unwind_on_sigterm("peer_redis"),
        RedisServer() as server,
        _killed_at_exit(workers),
    ):
        results, stop, expected = ctx.Queue(), ctx.Event(), ctx.Value("q", -1)
        consumer = None
        if shape.expect_delivery:
            consumer = ctx.Process(
                target=run_as_child_of,
                args=(os.getpid(), consume, server.port, expected, stop, results),
            )
            workers.append(consumer)
            consumer.start()
        start_ns = time.monotonic_ns() + 500_000_000
        start_wall_ms = time.time_ns() // 1_000_000 + 500
        cpu_before = server.cpu_s()
        sampler = StatsSampler(server.sample).start()
        started = time.monotonic()
        producers = [
            ctx.Process(
                target=run_as_child_of,
                args=(
                    os.getpid(),
                    produce,
                    i,
                    shape,
                    server.port,
                    start_ns,
                    start_wall_ms,
                    results,
                ),
            )
            for i in range(shape.producers)
        ]
        for process in producers:
            workers.append(process)
            process.start()
        outcomes = [results.get(timeout=shape.duration_s * 3 + 60) for _ in producers]
        send_s = time.monotonic() - started - 0.5
        sent = sum(o[1] for o in outcomes)
        latest_ms = max(o[2] for o in outcomes)
        figures = {"memory_after_send_phase": server.memory()}
        expected.value = sent
        if consumer is not None:
            last_due_in_s = (latest_ms - time.time_ns() // 1_000_000) / 1000
            consumer.join(max(last_due_in_s, 0) + shape.drain_timeout_ms / 1000)
            stop.set()  # a consumer that has not got everything by now never will
            _, received, early, last_received_ms, blob, worst = results.get(timeout=60)
        sampler.stop()
        cpu_s = server.cpu_s() - cpu_before
        run_s = time.monotonic() - started
        figures |= {
            "pending": server.pending(),
            "redis_peak_rss_bytes": server.peak_rss_bytes(),
            "disk": server.disk(),
        }
        for process in workers:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    figures = {
        "peer": "redis sorted set (AOF everysec)",
        "scenario": shape.name,
        "rate_target": shape.rate,
        "rate_achieved": round(sent / send_s),
        "sent": sent,
        **figures,
        "redis_cpu_percent": round(100 * cpu_s / run_s, 1),
        "load_before": load_before,
        "python": interpreter(),  # its producers' and consumer's: compare runs on the same one
        "shape": dataclasses.asdict(shape),
    }
    if consumer is not None:
        figures |= delivery_figures(sent, received, early, HdrHistogram.decode(blob))
        figures["timeline"] = timeline(
            worst, sampler.cpu_percent_by_second(),
            columns={"machine_cpu_percent": sampler.machine_percent_by_second()},
        )  # fmt: skip
        if shape.burst_window_ms:
            opens_ms = start_wall_ms + shape.burst_offset_ms
            figures["last_received_after_window_opened_ms"] = last_received_ms - opens_ms
    print(json.dumps(figures))
    if json_path:
        with open(json_path, "w") as out:
            json.dump(figures, out, indent=2)


def delivery_figures(sent: int, received: int, early: int, errors) -> dict:
    return {
        "received": received,
        "lost": sent - received,
        "early": early,
        "delay_error_ms": {
            q: errors.get_value_at_percentile(p)
            for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9))
        }
        | {"max": errors.get_max_value()},
    }


if __name__ == "__main__":
    main()
