"""The cluster fault suite's load and its figures: producers sending timers through every
node, waiting for every acknowledged timer, and the line each scenario prints.

Lateness is measured for the timers due inside the fault window (from the fault's start
until the scenario's fault function returns): the first delivery's arrival at a consumer
less the timer's deliver time, the figure a failover costs the timers it straddles.
"""

from __future__ import annotations

import threading
import time

from helpers.cluster_nodes import ClusterRun
from timerwheel.client import RemoteError, TimerClient
from timerwheel.cluster.partitions import partition_of

BATCH = 50  # sends a call: three producers make a few thousand sends a second here


class Producer:
    """Sends timers due 0.5-4 s ahead through one node until stopped, BATCH a call; keeps
    what was acknowledged (id -> deliver_at_ms)."""

    def __init__(self, target: str, topic: str, acked: dict[str, int], lock: threading.Lock):
        self.target, self.topic, self.acked, self.lock = target, topic, acked, lock
        self.stop = threading.Event()
        self.refused = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Producer:
        self.thread.start()
        return self

    def _run(self) -> None:
        with TimerClient(self.target, timeout_s=5) as client:
            n = 0
            while not self.stop.is_set():
                requests = []
                for _ in range(BATCH):
                    n += 1
                    delay_ms = 500 + (n * 37) % 3500
                    requests.append(client.request(self.topic, f"m{n}", delay_ms=delay_ms))
                try:
                    results = client.send_batch(requests)
                except RemoteError:
                    self.refused += 1  # the node is down or owns nothing yet: not acknowledged
                    self.stop.wait(0.05)
                    continue
                with self.lock:
                    self.acked.update((r.message_id, r.deliver_at_ms) for r in results)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(10)


def wait_delivered(run: ClusterRun, acked: dict[str, int], bound_s: float) -> set[str]:
    deadline = time.monotonic() + bound_s
    while True:
        with run.lock:
            got = {r.message_id for r in run.received}
        missing = set(acked) - got
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(0.2)


def percentile(values: list[int], fraction: float) -> int:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))] if ordered else 0


def lateness(
    run: ClusterRun, acked: dict[str, int], window_ms: tuple[float, float]
) -> dict[str, int]:
    """P50/P99/max (ms) of the first arrival less the deliver time, over the acknowledged
    timers due inside `window_ms` and delivered."""
    start, end = window_ms
    with run.lock:
        first: dict[str, int] = {}
        for r in run.received:
            if r.message_id not in first or r.received_at_ms < first[r.message_id]:
                first[r.message_id] = r.received_at_ms
    late = [
        first[m] - due for m, due in acked.items() if start <= due <= end and m in first
    ]  # fmt: skip
    return {
        "due_in_fault": len(late), "late_p50_ms": percentile(late, 0.50),
        "late_p99_ms": percentile(late, 0.99), "late_max_ms": max(late, default=0),
    }  # fmt: skip


def report(name: str, run: ClusterRun, acked: dict[str, int], missing: set[str], **extra):
    with run.lock:
        received = list(run.received)
    seen: dict[str, int] = {}
    early = 0
    for r in received:
        seen[r.message_id] = seen.get(r.message_id, 0) + 1
        if r.message_id in acked and r.received_at_ms < acked[r.message_id]:
            early += 1
    duplicates = sum(count - 1 for count in seen.values())
    span_s = (max(acked.values()) - min(acked.values())) / 1000 if acked else 0
    figures = {
        # sends a second: over the span of their deliver times, less the delays' spread
        "acknowledged": len(acked), "sends_per_s": round(len(acked) / max(span_s - 3.5, 1)),
        "lost": len(missing), "early": early, "duplicates": duplicates, **extra,
    }  # fmt: skip
    print(f"\n[{name}] " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    if missing:
        by_partition: dict[int, int] = {}
        for message_id in missing:
            partition = partition_of(message_id, run.partitions)
            by_partition[partition] = by_partition.get(partition, 0) + 1
        late = sorted(acked[m] for m in missing)
        print(f"  lost by partition {by_partition}; due {late[0]}..{late[-1]}")
        for node, server in run.servers.items():
            moves = [
                (e.get("event"), e.get("partition"), e.get("timestamp"))
                for e in server.events
                if str(e.get("event", "")).startswith("cluster_partition")
            ]
            print(f"  {node}: {moves}")
        for consumer in run.consumers:
            alive = consumer.thread is not None and consumer.thread.is_alive()
            print(f"  consumer {consumer.name}: alive {alive}, errors {consumer.errors[-5:]}")
    return figures
