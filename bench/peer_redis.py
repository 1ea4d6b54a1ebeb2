"""The peer timerwheel is measured against: the classic Redis sorted-set delay queue.

    python -m bench.peer_redis --rate 14000 --duration 60 --delay-scale 0.1
    python -m bench.peer_redis --rate 40000 --duration 60 --json /tmp/redis-40k.json

Same shape as `timerwheel loadtest --scenario tdmq`: open-loop producers (processes) send
at a fixed rate in batches (one pipelined ZADD of `--batch` members per round trip), each
message due after a uniform delay of 30 s..10 min times `--delay-scale`, 100-byte bodies;
one consumer pops due members and records the delay error (receive time minus deliver
time, first receipts) in an HDR histogram. The queue is one sorted set, score = deliver
time in ms, popped atomically by a Lua script (ZRANGEBYSCORE -inf now LIMIT + ZREM), the
way such queues are written; the consumer polls when nothing is due, waiting until the
earliest member is due but at most `--poll-ms`.

The script starts its own `redis-server` (Debian's package) on 127.0.0.1, a free port, a
temporary directory, AOF on with `appendfsync everysec` (what the issue's Redis run used),
and stops it at the end, always: on SIGTERM too, and a SIGKILLed script's redis-server
gets SIGTERM from the kernel and its producers and consumer die with it. It prints one
JSON line (and writes it to --json): the achieved send rate, delay error
P50/P90/P99/P999/max, lost count, and Redis's CPU.
"""

from __future__ import annotations

import argparse
import contextlib
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

import psutil
from hdrh.histogram import HdrHistogram

from engine.proc import die_with_parent, run_as_child_of
from loadtest.pacing import use_measuring_switch_interval

KEY = "delayq"
POP_DUE = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
if #due > 0 then redis.call('ZREM', KEYS[1], unpack(due)) end
return due
"""


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

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        shutil.rmtree(self.dir, ignore_errors=True)


def _exit_on_sigterm(signum: int, _frame: object) -> None:
    """Unwind, so redis-server is stopped, its dir removed and the workers killed."""
    raise SystemExit(128 + signum)


def produce(index: int, args, port: int, start_ns: int, results) -> None:
    import redis

    use_measuring_switch_interval()  # as the harness's processes (loadtest.pacing)
    client = redis.Redis(port=port)
    rng = random.Random(index)
    per_producer = args.rate / args.producers
    batches = int(args.rate * args.duration / args.producers / args.batch)
    low, high = int(30_000 * args.delay_scale), int(600_000 * args.delay_scale)
    pad = b"x" * max(args.body_bytes - 40, 0)
    sent, latest_ms = 0, 0
    for k in range(batches):
        due_ns = start_ns + int(k * args.batch / per_producer * 1e9)
        wait_s = (due_ns - time.monotonic_ns()) / 1e9
        if wait_s > 0:
            time.sleep(wait_s)  # open-loop pacing to a fixed schedule
        now_ms = time.time_ns() // 1_000_000
        members = {}
        for i in range(args.batch):
            deliver_ms = now_ms + rng.randint(low, high)
            latest_ms = max(latest_ms, deliver_ms)
            members[b"%d:%d:%d:" % (index, k * args.batch + i, deliver_ms) + pad] = deliver_ms
        client.zadd(KEY, members)
        sent += args.batch
    results.put(("producer", sent, latest_ms))


def consume(args, port: int, stop, results) -> None:
    import redis

    use_measuring_switch_interval()
    client = redis.Redis(port=port)
    pop = client.register_script(POP_DUE)
    errors = HdrHistogram(1, 3_600_000, 3)
    seen: set[bytes] = set()
    early = 0
    while not stop.is_set():
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
        if not due:
            head = client.zrange(KEY, 0, 0, withscores=True)
            wait_ms = args.poll_ms if not head else min(head[0][1] - now_ms, args.poll_ms)
            if wait_ms > 0:
                stop.wait(wait_ms / 1000)
    results.put(("consumer", len(seen), early, errors.encode()))


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=14_000)
    parser.add_argument("--duration", type=float, default=60.0)
    parser.add_argument("--delay-scale", type=float, default=0.1)
    parser.add_argument("--producers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=100)
    parser.add_argument("--body-bytes", type=int, default=100)
    parser.add_argument("--poll-ms", type=float, default=1.0)
    parser.add_argument("--json", help="also write the figures here")
    args = parser.parse_args()
    load_before = os.getloadavg()
    ctx = mp.get_context("spawn")
    signal.signal(signal.SIGTERM, _exit_on_sigterm)
    workers: list = []
    with RedisServer() as server, _killed_at_exit(workers):
        results, stop = ctx.Queue(), ctx.Event()
        consumer = ctx.Process(
            target=run_as_child_of, args=(os.getpid(), consume, args, server.port, stop, results)
        )
        workers.append(consumer)
        consumer.start()
        start_ns = time.monotonic_ns() + 500_000_000
        cpu_before = server.cpu_s()
        started = time.monotonic()
        producers = [
            ctx.Process(
                target=run_as_child_of,
                args=(os.getpid(), produce, i, args, server.port, start_ns, results),
            )
            for i in range(args.producers)
        ]
        for process in producers:
            workers.append(process)
            process.start()
        outcomes = [results.get(timeout=args.duration * 3 + 60) for _ in producers]
        send_s = time.monotonic() - started - 0.5
        sent = sum(o[1] for o in outcomes)
        latest_ms = max(o[2] for o in outcomes)
        wait_s = (latest_ms - time.time_ns() // 1_000_000) / 1000 + 2
        stop.wait(max(wait_s, 0))  # until the last message is due, plus 2 s
        stop.set()
        _, received, early, blob = results.get(timeout=60)
        cpu_s = server.cpu_s() - cpu_before
        run_s = time.monotonic() - started
        for process in [*producers, consumer]:
            process.join(timeout=30)
            if process.is_alive():
                process.kill()
    errors = HdrHistogram.decode(blob)
    figures = {
        "peer": "redis sorted set (AOF everysec)",
        "rate_target": args.rate,
        "rate_achieved": round(sent / send_s),
        "sent": sent,
        "received": received,
        "lost": sent - received,
        "early": early,
        "delay_error_ms": {
            q: errors.get_value_at_percentile(p)
            for q, p in (("p50", 50), ("p90", 90), ("p99", 99), ("p999", 99.9))
        }
        | {"max": errors.get_max_value()},
        "redis_cpu_percent": round(100 * cpu_s / run_s, 1),
        "load_before": load_before,
        "args": vars(args),
    }
    print(json.dumps(figures))
    if args.json:
        with open(args.json, "w") as out:
            json.dump(figures, out, indent=2)


if __name__ == "__main__":
    main()
