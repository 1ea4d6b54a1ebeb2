"""What cluster mode costs against one node, and how it spreads as nodes are added.

    python -m bench.cluster_cost                          # single, then 1, 2 and 3 nodes
    python -m bench.cluster_cost --rate 1000 --duration 40s --shapes single,3 --json cost.json

For each shape, the same load, back to back: `single` is `timerwheel serve` on its embedded
store (fsync a group commit); `N` is `timerwheel local-cluster`'s shape with N nodes over
three NATS servers (R3, `sync_interval: always`: a quorum fsyncs each group commit's log
record), 6 partitions. The load is open loop at `--rate` sends a second, SendBatch of
`--batch` client ids of one partition each (so no call needs the forwarding hop), each
batch to the node that owns its partition (what a routing client does), timers due 0.5-2 s
later; one consumer stream per node takes that node's own deliveries and acks them there,
as the client's consumer acks (`timerwheel.acks.AckSender`; `--per-batch-acks`: one Ack
call a batch, waited for, which falls behind under CPU load: docs/cluster.md).
A cluster is loaded once its partition map has settled (unchanged for `SETTLED_FOR_S`:
a cluster just started hands partitions to their preferred nodes for a few seconds);
`owners_moved_in_window` says whether it moved while measured.

Measured over the steady part (from `--warmup` to the end of sending), from /proc:

* CPU seconds of every timerwheel process (a node and its children) and of the NATS
  servers, over the messages sent in that window: **CPU a message**, in total, and per
  node over the messages of the partitions it owns. Each message is sent, fired and acked
  inside the run, so this is a message's whole cost at this rate;
* the send latency of each SendBatch call (P50, P99): what a producer waits for its
  acknowledgement: one fsync locally, a quorum's fsync through NATS in cluster mode;
* partitions each node owns, and that every message sent was delivered (lost must be 0).

On one machine the nodes share its cores, so throughput cannot rise with nodes; what the
run shows is that partitions spread across the nodes and that a node's CPU a message stays
flat as nodes are added (the work is divided, not repeated). Run it alone on the machine:
other load moves CPU seconds (not a message's share of them by much, but its latency).
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from bench.cluster_cost_probes import NodeAcks, cpu_seconds, gate_stats, hub_state, states_of
from timerwheel.acks import AckSender
from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.durations import parse_duration_ms
from timerwheel.loadtest.server_proc import SpawnedServer
from timerwheel.procs.local_cluster import LocalCluster
from timerwheel.server.forwarding import FORWARDED
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

TOPIC = "cost"
PARTITIONS = 6
DELAY_MIN_MS, DELAY_MAX_MS = 500, 2_000
DRAIN_S = 60.0
# The map counts as settled when unchanged this long: more than the takeover grace (3 s)
# plus a few renewal intervals, so the hand-over to preferred nodes has finished.
SETTLED_FOR_S = 10.0
SETTLE_TIMEOUT_S = 90.0
DRAIN_STEP_S = 5.0
MISSING_SAMPLE = 200  # ids never received whose state is asked for at the end


def owners_of(address: str) -> dict[int, str]:
    """partition -> owner node name, as the node at `address` knows the map."""
    with TimerClient(address, timeout_s=10) as client:
        return {o.partition: o.node for o in client.cluster_map().owners}


def settled_owners(address: str) -> dict[int, str]:
    """The partition map once it has stopped moving. A cluster that has just started
    hands partitions to their preferred nodes one renewal at a time after the takeover
    grace (docs/cluster.md, "Placement"); a load started before that is sent to nodes
    that forward it, and every node's CPU then looks alike whatever it owns."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    owners, since = owners_of(address), time.monotonic()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = owners_of(address)
        if now != owners or "" in now.values():
            owners, since = now, time.monotonic()
        elif time.monotonic() - since >= SETTLED_FOR_S:
            return owners
    raise SystemExit(f"the partition map did not settle in {SETTLE_TIMEOUT_S:g} s: {owners}")


def percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


@dataclass
class Target:
    name: str
    address: str
    pid: int
    log: Path | None = None
    owned: list[int] = field(default_factory=list)


@dataclass
class Load:
    """Senders and consumers against `targets`, the partition map `owner_of`."""

    targets: list[Target]
    owner_of: dict[int, Target]
    rate: int
    batch: int
    duration_s: float
    clustered: bool
    per_batch_acks: bool = False
    latencies_s: list[tuple[float, float]] = field(default_factory=list)  # (sent at, seconds)
    sent: dict[str, tuple[float, str]] = field(default_factory=dict)  # id -> (when, node)
    received: set[str] = field(default_factory=set)
    errors: list[str] = field(default_factory=list)
    acks: int = 0  # Ack calls, and the seconds the consumers waited on them in all
    ack_s: float = 0.0
    stop_calls: list[grpc.Future] = field(default_factory=list)  # the Subscribe streams
    lock: threading.Lock = field(default_factory=threading.Lock)
    stop: threading.Event = field(default_factory=threading.Event)

    @property
    def metadata(self) -> list[tuple[str, str]] | None:
        return [(FORWARDED, "1")] if self.clustered else None

    def consume(self, target: Target) -> None:
        """This node's own deliveries, acked on it; again after an error until stopped.

        Acked as the project's consumer acks (`timerwheel.acks.AckSender`: gathered for
        a linger, several calls on the wire), unless `per_batch_acks`: then one Ack call
        a delivery batch, waited for before the next batch is read. That one stalls under
        CPU load (docs/cluster.md, "A consumer that acks each batch in turn"): kept to
        show it."""
        request = pb.SubscribeRequest(topic=TOPIC, max_in_flight=2_000)
        while not self.stop.is_set():
            try:
                with TimerClient(target.address, timeout_s=10) as client:
                    stub = pb_grpc.TimerServiceStub(client.channel)
                    call = stub.Subscribe(request, metadata=self.metadata)
                    self.stop_calls.append(call)
                    acks = NodeAcks(self, stub, target.name)
                    if self.per_batch_acks:
                        for batch in call:
                            acks.ack(TOPIC, [d.message_id for d in batch.deliveries])
                    else:
                        with AckSender(acks, TOPIC) as sender:  # type: ignore[arg-type]
                            for batch in call:
                                sender.ack([d.message_id for d in batch.deliveries])
            except grpc.RpcError as error:
                if not self.stop.is_set():
                    self.errors.append(f"consume {target.name}: {error.code()}")
            self.stop.wait(0.2)

    def send(self, index: int, senders: int, run: str) -> None:
        """Batches of one partition each, to its owner, paced at this sender's share."""
        clients = {t.name: TimerClient(t.address, timeout_s=10) for t in self.targets}
        stubs = {name: pb_grpc.TimerServiceStub(c.channel) for name, c in clients.items()}
        interval_s = self.batch * senders / self.rate
        start = time.monotonic()
        seq = 0
        rng = random.Random(index)
        try:
            for n in range(int(self.duration_s / interval_s)):
                wait = start + n * interval_s - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                partition = rng.randrange(PARTITIONS)
                ids: list[str] = []
                while len(ids) < self.batch:
                    seq += 1
                    message_id = f"{run}-{index}-{seq}"
                    if partition_of(message_id, PARTITIONS) == partition or not self.clustered:
                        ids.append(message_id)
                now_ms = int(time.time() * 1000)
                requests = [
                    pb.SendRequest(topic=TOPIC, message_id=i, body=b"x" * 100,
                                   deliver_at_ms=now_ms + rng.randint(DELAY_MIN_MS, DELAY_MAX_MS))
                    for i in ids
                ]  # fmt: skip
                owner = self.owner_of[partition] if self.clustered else self.targets[0]
                began = time.monotonic()
                try:
                    stubs[owner.name].SendBatch(pb.SendBatchRequest(messages=requests), timeout=10)
                except grpc.RpcError as error:
                    self.errors.append(f"send {owner.name}: {error.code()}")
                    continue
                took = time.monotonic() - began
                with self.lock:
                    self.latencies_s.append((began, took))
                    for i in ids:
                        self.sent[i] = (began, owner.name)
        finally:
            for client in clients.values():
                client.close()


def measure(shape: str, rate: int, batch: int, duration_s: float, warmup_s: float,
            base: Path, per_batch_acks: bool = False) -> dict:  # fmt: skip
    """One shape's run: start it, load it, read its figures, stop it."""
    clustered = shape != "single"
    with _started(shape, base) as targets_and_nats:
        targets, nats_pids = targets_and_nats
        owner_of: dict[int, Target] = {}
        settled = settled_owners(targets[0].address) if clustered else {}
        by_name = {t.name: t for t in targets}
        for partition, name in settled.items():
            owner_of[partition] = by_name[name]
            by_name[name].owned.append(partition)
        load = Load(targets, owner_of, rate, batch, duration_s, clustered, per_batch_acks)
        consumers = [threading.Thread(target=load.consume, args=(t,), daemon=True)
                     for t in targets]  # fmt: skip
        for thread in consumers:
            thread.start()
        senders = 4
        run = f"c{int(time.time())}"
        threads = [threading.Thread(target=load.send, args=(i, senders, run), daemon=True)
                   for i in range(senders)]  # fmt: skip
        began = time.monotonic()
        for thread in threads:
            thread.start()
        time.sleep(warmup_s)
        cpu0 = {t.name: cpu_seconds(t.pid) for t in targets}
        nats0 = sum(cpu_seconds(pid) for pid in nats_pids)
        window_start = time.monotonic()
        for thread in threads:
            thread.join()
        window_s = time.monotonic() - window_start
        cpu1 = {t.name: cpu_seconds(t.pid) for t in targets}
        nats1 = sum(cpu_seconds(pid) for pid in nats_pids)
        drain_start = time.monotonic()
        deadline = drain_start + DRAIN_S
        timeline: list[int] = []  # messages not yet received, every DRAIN_STEP_S of the drain
        next_step = drain_start
        while time.monotonic() < deadline:
            with load.lock:
                left = len(set(load.sent) - load.received)
            if time.monotonic() >= next_step:
                timeline.append(left)
                next_step += DRAIN_STEP_S
            if not left:
                break
            time.sleep(0.2)
        drain_s = time.monotonic() - drain_start
        hubs = {}
        with load.lock:
            late = bool(set(load.sent) - load.received)
        if late:  # what each hub holds, before the consumers go
            hubs = {t.name: hub_state(t, clustered) for t in targets}
        load.stop.set()
        for call in load.stop_calls:
            call.cancel()
        for thread in consumers:
            thread.join(10)
        # Ownership must not have moved in the window: the figures per own message assume it.
        moved = owners_of(targets[0].address) != settled if clustered else False
        missing = sorted(set(load.sent) - load.received)
        missing_states = states_of(targets[0].address, missing[:MISSING_SAMPLE])
        in_window = sum(1 for at, _ in load.sent.values() if at >= window_start)
        by_node = {t.name: 0 for t in targets}
        for at, name in load.sent.values():
            if at >= window_start:
                by_node[name] += 1
        latencies = [took for at, took in load.latencies_s if at >= window_start]
        per_node = {n: cpu1[n] - cpu0[n] for n in cpu0}
        total = sum(per_node.values())
        return {
            "shape": shape,
            "nodes": len(targets),
            "partitions_by_node": {t.name: t.owned for t in targets} if clustered else {},
            "owners_moved_in_window": moved,
            "sent": len(load.sent),
            "lost": len(missing),  # sent, acknowledged, never received within the drain
            # what the server says of (a sample of) those: FIRED or SCHEDULED = late, held
            "missing_states": missing_states,
            "hubs_at_drain_end": hubs,
            "drain_s": round(drain_s, 1),
            f"not_received_every_{DRAIN_STEP_S:g}_s_of_drain": timeline,
            "acks": load.acks,
            "ids_per_ack": round(len(load.received) / max(1, load.acks), 1),
            "ack_ms_mean": round(load.ack_s / max(1, load.acks) * 1000, 1),
            # each node's delivery gate: closings, milliseconds closed (in all, the longest)
            "gate_by_node": {t.name: gate_stats(t.log) for t in targets if t.log is not None},
            "sends_per_s": round(in_window / window_s, 1),
            "send_latency_ms": {"p50": round(percentile(latencies, 0.5) * 1000, 2),
                                "p99": round(percentile(latencies, 0.99) * 1000, 2)},
            "cpu_us_per_message": round(total / max(1, in_window) * 1e6, 1),
            "cpu_us_per_message_by_node": {
                n: round(s / max(1, in_window) * 1e6, 1) for n, s in per_node.items()
            },
            # a node's CPU over the messages of its own partitions: flat as nodes are added
            # when the work is divided, not repeated
            "cpu_us_per_own_message_by_node": {
                n: round(s / max(1, by_node[n]) * 1e6, 1) for n, s in per_node.items()
            },
            "cpu_percent_by_node": {n: round(s / window_s * 100, 1) for n, s in per_node.items()},
            "nats_cpu_us_per_message": round((nats1 - nats0) / max(1, in_window) * 1e6, 1),
            "errors": load.errors[:10],
            "elapsed_s": round(time.monotonic() - began, 1),
        }  # fmt: skip


class _started:
    """The shape's processes, stopped on exit: `(targets, nats pids)`."""

    def __init__(self, shape: str, base: Path) -> None:
        self.shape, self.base = shape, base
        self.server: SpawnedServer | None = None
        self.cluster: LocalCluster | None = None

    def __enter__(self) -> tuple[list[Target], list[int]]:
        if self.shape == "single":
            self.server = SpawnedServer().__enter__()
            return [Target("single", self.server.target, self.server.pid)], []
        nodes = int(self.shape)
        self.cluster = LocalCluster(self.base / f"cluster-{nodes}", nodes=nodes,
                                    partitions=PARTITIONS).__enter__()  # fmt: skip
        targets = [Target(n.name, n.target, n.pid, n.log) for n in self.cluster.timer_nodes]
        return targets, [s.pid for s in self.cluster.nats_servers]

    def __exit__(self, *exc: object) -> None:
        if self.server is not None:
            self.server.__exit__(*exc)
        if self.cluster is not None:
            self.cluster.__exit__(*exc)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.cluster_cost", description=__doc__)
    parser.add_argument("--rate", type=int, default=1_000, help="sends a second (default 1000)")
    parser.add_argument("--batch", type=int, default=20, help="messages a SendBatch (default 20)")
    parser.add_argument("--duration", default="40s", help="send phase (default 40s)")
    parser.add_argument("--warmup", default="10s", help="not measured at the start (default 10s)")
    parser.add_argument("--shapes", default="single,1,2,3", help="default single,1,2,3")
    parser.add_argument("--json", type=Path, help="write every shape's figures here")
    parser.add_argument(
        "--per-batch-acks",
        action="store_true",
        help="ack each delivery batch in turn, not as the client's AckSender",
    )
    parser.add_argument(
        "--keep",
        action="store_true",
        help="keep the nodes' and NATS servers' logs (the path is printed)",
    )
    args = parser.parse_args(argv)
    duration_s = parse_duration_ms(args.duration, "--duration") / 1000
    warmup_s = parse_duration_ms(args.warmup, "--warmup") / 1000
    if warmup_s >= duration_s:
        parser.error(f"--warmup {args.warmup} must be shorter than --duration {args.duration}")
    shapes = args.shapes.split(",")
    for shape in shapes:
        if shape != "single" and shape not in ("1", "2", "3"):
            parser.error(f"--shapes: {shape!r}: single, 1, 2 or 3")
    base = Path(tempfile.mkdtemp(prefix="timerwheel-cost-"))
    results = []
    try:
        for shape in shapes:
            result = measure(shape, args.rate, args.batch, duration_s, warmup_s, base,
                             args.per_batch_acks)  # fmt: skip
            print(json.dumps(result), flush=True)
            results.append(result)
    finally:
        if args.keep:
            print(f"logs kept in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 1 if any(r["lost"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
