"""The fault suite's first scenarios, end to end: three `timerwheel serve --cluster` nodes
over a real three-server JetStream cluster on loopback (docs/cluster.md, "Failures and
what they cost"). Network namespaces are not used yet: every process is on 127.0.0.1.

Each scenario sends timers through every node while some fall due during the fault, and
prints: acknowledged sends, lost (must be 0), early (must be 0), duplicates, failover
seconds (fault -> the dead node's partitions owned again), records replayed at takeover.
"""

from __future__ import annotations

import signal
import threading
import time
from datetime import datetime

import pytest
from helpers.cluster_nodes import ClusterRun

from timerwheel.client import RemoteError, TimerClient
from timerwheel.cluster.partitions import partition_of

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

DRAIN_S = 60.0  # every acknowledged timer delivered after the fault, on 2 busy cores


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
            print(
                f"  consumer {consumer.name}: alive {consumer.thread.is_alive()}, "
                f"errors {consumer.errors[-5:]}"
            )
    return figures


def wait_taken(run: ClusterRun, partitions: set[int], by_others_than: str, bound_s: float) -> float:
    """Seconds until other nodes own `partitions` (fault -> lease taken -> restored)."""
    started = time.monotonic()
    while True:
        owned = run.owned()
        taken = {p for name, parts in owned.items() if name != by_others_than for p in parts}
        if partitions <= taken:
            return time.monotonic() - started
        assert time.monotonic() - started < bound_s, f"not taken over in {bound_s} s: {owned}"
        time.sleep(0.1)


def takeovers(
    run: ClusterRun, marks: dict[str, tuple[object, int]]
) -> list[dict]:  # fmt: skip
    """The takeovers since the marks (a node started again since has all its events
    counted), from the nodes' logs."""
    found = []
    for name, server in run.servers.items():
        before, index = marks.get(name, (None, 0))
        for event in server.events[index if before is server else 0 :]:
            if event.get("event") == "cluster_partition_owned":
                found.append(event)
    return found


def under_load(run: ClusterRun, fault, name: str) -> dict:
    """Steady sends through every node, `fault(run)` in the middle, then every acknowledged
    timer awaited; the figures printed and returned."""
    run.wait_all_owned()
    run.consume_everywhere()
    acked: dict[str, int] = {}
    lock = threading.Lock()
    producers = [
        Producer(server.target, run.topic, acked, lock).start() for server in run.servers.values()
    ]
    try:
        time.sleep(2.0)  # load running, timers falling due, before the fault
        marks = {n: (server, len(server.events)) for n, server in run.servers.items()}
        extra = fault(run)
        time.sleep(2.0)  # load after the fault
    finally:
        for producer in producers:
            producer.close()
    missing = wait_delivered(run, acked, DRAIN_S)
    moved = set(extra.pop("partitions", set()))
    taken = takeovers(run, marks)
    extra["takeovers"] = len(taken)
    extra["records_replayed"] = sum(
        int(e["records_replayed"]) for e in taken if int(e["partition"]) in moved
    )
    return report(name, run, acked, missing, partitions_moved=len(moved), **extra)


INF = float("inf")


def retaken_after(events: list[dict], since_ms: float) -> dict[int, float]:
    """Partition -> when (epoch ms) a node took its lease again after `since_ms` (its log's
    `cluster_lease_taken`: from there it restores, fires and, once owner, delivers)."""
    taken: dict[int, float] = {}
    for event in events:
        if event.get("event") != "cluster_lease_taken":
            continue
        at_ms = datetime.fromisoformat(event["timestamp"].replace("Z", "+00:00")).timestamp()
        if at_ms * 1000 > since_ms:
            taken.setdefault(int(event["partition"]), at_ms * 1000)
    return taken


def biggest_owner(run: ClusterRun) -> tuple[str, set[int]]:
    owned = run.owned()
    victim = max(owned, key=lambda name: len(owned[name]))
    return victim, set(owned[victim])


STOP_S = 60  # a node's graceful stop under load: leases handed back, calls' grace, RocksDB
MAX_IN_FLIGHT = 500  # each consumer's (helpers.cluster_nodes.Consumer)


def check(figures: dict, consumers: int = 3) -> None:
    assert figures["acknowledged"] > 100
    assert figures["lost"] == 0
    assert figures["early"] == 0
    # docs/cluster.md, "The duplicate bound": per ownership change, at most the un-acked
    # deliveries, which each consumer bounds by its max_in_flight (with at least one
    # change counted: a NATS election can make every node redeliver what was in flight)
    bound = consumers * MAX_IN_FLIGHT * max(figures["takeovers"], 1)
    assert figures["duplicates"] <= bound, f"{figures['duplicates']} duplicates > {bound}"


def test_kill_9_of_an_owner_loses_nothing_and_fails_over(tmp_path):
    def fault(run: ClusterRun) -> dict:
        victim, partitions = biggest_owner(run)
        run.servers[victim].kill()
        failover_s = wait_taken(run, partitions, victim, 30)
        return {"partitions": partitions, "failover_s": round(failover_s, 2)}

    with ClusterRun(tmp_path) as run:
        figures = under_load(run, fault, "kill -9 owner")
    check(figures)
    assert figures["failover_s"] <= 10.0


def test_a_paused_owner_delivers_nothing_it_lost(tmp_path):
    """SIGSTOP for twice the lease, then SIGCONT: its leases are taken meanwhile; resumed,
    it must deliver nothing fired after the pause (its verdict is STOP at once)."""
    resumed: dict[str, float] = {}

    def fault(run: ClusterRun) -> dict:
        victim, partitions = biggest_owner(run)
        resumed["victim"] = victim  # type: ignore[assignment]
        run.servers[victim].signal(signal.SIGSTOP)
        stopped_ms = time.time() * 1000
        try:
            failover_s = wait_taken(run, partitions, victim, 30)
            time.sleep(max(0.0, 8.0 - failover_s))  # twice the 4 s lease in all
        finally:
            run.servers[victim].signal(signal.SIGCONT)
        resumed["stopped_ms"] = stopped_ms
        return {"partitions": partitions, "failover_s": round(failover_s, 2)}

    with ClusterRun(tmp_path) as run:
        figures = under_load(run, fault, "SIGSTOP owner 8 s")
        victim = str(resumed["victim"])
        retaken = retaken_after(run.servers[victim].events, resumed["stopped_ms"])
        with run.lock:  # fired by the resumed node before it owned that partition again
            late = [
                r for r in run.received if r.node == victim
                and r.fired_at_ms > resumed["stopped_ms"] + 1000
                and r.fired_at_ms < retaken.get(partition_of(r.message_id, run.partitions), INF)
            ]  # fmt: skip
        lost_events = [
            e for e in run.servers[victim].events if e.get("event") == "cluster_partition_lost"
        ]
    check(figures)
    assert figures["failover_s"] <= 10.0
    assert lost_events, "the resumed node never gave its partitions up"
    assert late == [], f"the resumed node delivered {len(late)} timers it fired after the pause"


def test_killing_the_nats_server_leading_most_streams_loses_nothing(tmp_path):
    def fault(run: ClusterRun) -> dict:
        assert run.nats is not None
        leaders: dict[str, int] = {}
        for node in run.nats.nodes:
            for stream in node.monitor("/jsz?streams=true&accounts=true").get(
                "account_details", []
            ):
                for info in stream.get("stream_detail", []):
                    leader = (info.get("cluster") or {}).get("leader")
                    if leader:
                        leaders[leader] = leaders.get(leader, 0) + 1
            break
        name = max(leaders, key=lambda n: leaders[n]) if leaders else run.nats.nodes[0].name
        target = next(node for node in run.nats.nodes if node.name == name)
        run.nats.kill(target)
        started = time.monotonic()
        run.wait_all_owned(bound_s=30)
        return {
            "streams_led": leaders.get(name, 0),
            "recovered_s": round(time.monotonic() - started, 2),
        }

    with ClusterRun(tmp_path) as run:
        figures = under_load(run, fault, "kill -9 NATS leader")
    check(figures)


def test_losing_a_whole_machine_loses_nothing(tmp_path):
    """Node n<i> and NATS server n<i> are one machine: both killed, never restarted."""

    def fault(run: ClusterRun) -> dict:
        assert run.nats is not None
        victim, partitions = biggest_owner(run)
        machine = next(node for node in run.nats.nodes if node.name == victim)
        run.servers[victim].kill()
        run.nats.kill(machine)
        failover_s = wait_taken(run, partitions, victim, 30)
        return {"partitions": partitions, "failover_s": round(failover_s, 2)}

    with ClusterRun(tmp_path) as run:
        figures = under_load(run, fault, "lose a machine")
    check(figures)
    assert figures["failover_s"] <= 10.0


def test_a_rolling_restart_loses_nothing(tmp_path):
    """SIGTERM each node in turn (it hands its leases back), start it again, wait until the
    partitions are back where they belong, next."""

    def fault(run: ClusterRun) -> dict:
        moved: set[int] = set()
        for name in list(run.servers):
            moved |= set(run.owned().get(name, []))
            server = run.servers[name]
            server.signal(signal.SIGTERM)
            assert server.wait_exit(STOP_S) == 0
            run.restart_node(name)
            run.wait_all_owned(bound_s=60)
        return {"partitions": moved}

    with ClusterRun(tmp_path) as run:
        figures = under_load(run, fault, "rolling restart")
    check(figures)
