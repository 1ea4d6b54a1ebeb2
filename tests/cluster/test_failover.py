"""The fault suite's first scenarios, end to end: three `timerwheel serve --cluster` nodes
over a real three-server JetStream cluster on loopback (docs/cluster.md, "Failures and
what they cost"). Network namespaces are not used yet: every process is on 127.0.0.1.

Each scenario sends timers through every node while some fall due during the fault, and
prints: acknowledged sends, lost (must be 0), early (must be 0), duplicates, failover
seconds (fault -> the dead node's partitions owned again), records replayed at takeover.
"""

from __future__ import annotations

import threading
import time

import pytest
from helpers.cluster_nodes import ClusterRun

from timerwheel.client import RemoteError, TimerClient

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

DRAIN_S = 60.0  # every acknowledged timer delivered after the fault, on 2 busy cores


class Producer:
    """Sends timers due 0.5-4 s ahead through one node until stopped; keeps what was
    acknowledged (id -> deliver_at_ms)."""

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
                n += 1
                delay_ms = 500 + (n * 37) % 3500
                try:
                    result = client.send(self.topic, f"m{n}".encode(), delay_ms=delay_ms)
                except RemoteError:
                    self.refused += 1  # the node is down or owns nothing yet: not acknowledged
                    self.stop.wait(0.05)
                    continue
                with self.lock:
                    self.acked[result.message_id] = result.deliver_at_ms
                self.stop.wait(0.01)

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
    figures = {
        "acknowledged": len(acked), "lost": len(missing), "early": early,
        "duplicates": duplicates, **extra,
    }  # fmt: skip
    print(f"\n[{name}] " + ", ".join(f"{k} {v}" for k, v in figures.items()))
    return figures


def test_kill_9_of_an_owner_loses_nothing_and_fails_over(tmp_path):
    with ClusterRun(tmp_path) as run:
        before = run.wait_all_owned()
        run.consume_everywhere()
        acked: dict[str, int] = {}
        lock = threading.Lock()
        producers = [
            Producer(server.target, run.topic, acked, lock).start()
            for server in run.servers.values()
        ]
        try:
            time.sleep(2.0)  # load running, timers falling due, before the fault
            victim = max(before, key=lambda name: len(before[name]))
            lost_partitions = set(before[victim])
            killed_at = time.monotonic()
            run.servers[victim].kill()
            deadline = killed_at + 30
            while True:
                owned = run.owned()
                taken = {p for name, parts in owned.items() if name != victim for p in parts}
                if lost_partitions <= taken:
                    failover_s = time.monotonic() - killed_at
                    break
                assert time.monotonic() < deadline, f"not taken over in 30 s: {owned}"
                time.sleep(0.1)
            time.sleep(2.0)  # load on the survivors after the failover
        finally:
            for producer in producers:
                producer.close()
        missing = wait_delivered(run, acked, DRAIN_S)
        replayed = [
            int(event["records_replayed"])
            for name, server in run.servers.items() if name != victim
            for event in server.events if event.get("event") == "cluster_partition_owned"
            and int(event["partition"]) in lost_partitions
        ]  # fmt: skip
        figures = report(
            "kill -9 owner", run, acked, missing, failover_s=round(failover_s, 2),
            partitions_moved=len(lost_partitions), records_replayed=sum(replayed),
        )  # fmt: skip
        assert figures["acknowledged"] > 100
        assert figures["lost"] == 0, sorted(missing)[:10]
        assert figures["early"] == 0
        assert failover_s <= 10.0
