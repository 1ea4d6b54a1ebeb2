"""Real cluster-mode nodes for the fault suite: `timerwheel serve --cluster` processes over a
real three-server NATS JetStream cluster (helpers.nats), and consumers that record every
delivery they get.

`ClusterRun` owns everything it starts and stops all of it on exit, the nodes with
SIGKILL when the test is over (their leases then expire like any crashed node's). Given
`machines` (helpers.netns), node n<i> and NATS server n<i> run in machine n<i>'s network
namespace, on its address; otherwise all on 127.0.0.1. The namespaces are the caller's to
delete, after this run's exit.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc

from helpers.nats import NatsCluster
from helpers.netns import Machines
from helpers.serve_process import ServeProcess
from timerwheel.client import RemoteError, TimerClient
from timerwheel.cluster.partitions import preferred_node
from timerwheel.server.forwarding import FORWARDED
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

# A node starts once it has agreed the cluster's config and made (or found) its buckets
# and streams: JetStream API calls that queue behind a fault suite's load on 2 cores.
START_S = 90.0

# the log events that end a node's ownership of a partition (timerwheel.cluster.node)
GONE = ("cluster_partition_lost", "cluster_partition_fenced", "cluster_partition_handed_off")


@dataclass
class Received:
    message_id: str
    deliver_at_ms: int
    received_at_ms: int
    node: str
    fired_at_ms: int = 0


@dataclass
class Consumer:
    """Subscribes to `topic` on one node, acks every delivery, and resubscribes after a
    stream error until stopped (a node that restarts is subscribed to again)."""

    name: str
    target: str
    topic: str
    received: list[Received]
    lock: threading.Lock
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None
    errors: list[str] = field(default_factory=list)  # what ended each stream, for reports
    own_only: bool = True

    def start(self) -> Consumer:
        self.thread = threading.Thread(target=self._run, name=f"consume-{self.name}", daemon=True)
        self.thread.start()
        return self

    def _run(self) -> None:
        """`own_only`: subscribe and ack as a relaying node does (both marked forwarded), so
        this stream gets only the deliveries of the node it is connected to (what the
        fault suite needs to tell which node delivered what) and each ack settles in that
        node's hub. Unmarked, an ack goes to the partition's owner now: after the partition
        moved, the delivering hub would hold the messages in flight for ever, filling the
        stream's max_in_flight. Otherwise a plain client's stream, fanned in from every
        node (server.fan_in)."""
        metadata = [(FORWARDED, "1")] if self.own_only else None
        request = pb.SubscribeRequest(topic=self.topic, max_in_flight=500)
        while not self.stop.is_set():
            try:
                with TimerClient(self.target, timeout_s=5) as client:
                    stub = pb_grpc.TimerServiceStub(client.channel)
                    call = stub.Subscribe(request, metadata=metadata)
                    self._subscription = call
                    for batch in call:
                        now = int(time.time() * 1000)
                        deliveries = list(batch.deliveries)
                        with self.lock:
                            self.received.extend(
                                Received(
                                    d.message_id, d.deliver_at_ms, now, self.name, d.fired_at_ms
                                )
                                for d in deliveries
                            )
                        if deliveries:  # to this node's hub too (it holds them in flight)
                            stub.Ack(
                                pb.AckRequest(
                                    topic=self.topic, message_ids=[d.message_id for d in deliveries]
                                ),
                                metadata=metadata,
                                timeout=5,
                            )
                        if self.stop.is_set():
                            break
            except (grpc.RpcError, RemoteError, OSError, ValueError) as error:
                self.errors.append(f"{time.strftime('%H:%M:%S')} {error}"[:200])
            self.stop.wait(0.2)  # the node is down or restarting: try again

    def close(self) -> None:
        self.stop.set()
        subscription = getattr(self, "_subscription", None)
        if subscription is not None:
            subscription.cancel()
        if self.thread is not None:
            self.thread.join(10)


@dataclass
class ClusterRun:
    base_dir: Path
    nodes: int = 3
    partitions: int = 6
    topic: str = "orders"
    nats: NatsCluster | None = None
    servers: dict[str, ServeProcess] = field(default_factory=dict)
    consumers: list[Consumer] = field(default_factory=list)
    received: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    machines: Machines | None = None
    # more `serve` flags for a node, by its name (e.g. its own --export-root)
    node_flags: Callable[[str], list[str]] | None = None

    def __enter__(self) -> ClusterRun:
        self.nats = NatsCluster(self.base_dir / "nats", machines=self.machines)
        try:
            self.nats.start()
            for index in range(self.nodes):
                self.start_node(f"n{index + 1}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start_node(self, name: str) -> ServeProcess:
        assert self.nats is not None
        host, prefix, insecure = "127.0.0.1", [], []
        if self.machines is not None:  # a test bridge only the test reaches: no TLS, no tokens
            machine = self.machines.named(name)
            host, prefix, insecure = machine.address, machine.prefix, ["--insecure"]
        server = ServeProcess(
            self.base_dir / name, "--cluster", ",".join(self.nats.urls), "--node-name", name,
            "--partitions", str(self.partitions), *insecure,
            *(self.node_flags(name) if self.node_flags else ()), start_s=START_S, host=host,
            prefix=prefix,
        )  # fmt: skip
        self.servers[name] = server
        return server

    def restart_node(self, name: str) -> ServeProcess:
        """Start node `name` again (same name and data dir); its consumer finds it by the
        new port."""
        self.servers[name].kill()
        server = self.start_node(name)
        for consumer in self.consumers:
            if consumer.name == name:
                consumer.target = server.target
        return server

    def consume_everywhere(self) -> None:
        for name, server in self.servers.items():
            self.consumers.append(
                Consumer(name, server.target, self.topic, self.received, self.lock).start()
            )

    def owned(self) -> dict[str, list[int]]:
        """Each live node's partitions, from its log: owned, and not lost since."""
        owned: dict[str, list[int]] = {}
        for name, server in self.servers.items():
            if server.proc.poll() is not None:
                continue
            mine: set[int] = set()
            with server._cond:
                events = list(server.events)
            for event in events:
                if event.get("event") == "cluster_partition_owned":
                    mine.add(int(event["partition"]))
                elif event.get("event") in GONE:
                    mine.discard(int(event["partition"]))
            owned[name] = sorted(mine)
        return owned

    def preferred(self) -> dict[str, list[int]]:
        """Where each partition belongs among the live nodes (as the nodes compute it)."""
        live = [name for name, server in self.servers.items() if server.proc.poll() is None]
        spread: dict[str, list[int]] = {name: [] for name in live}
        for partition in range(self.partitions):
            spread[preferred_node(partition, live)].append(partition)
        return spread

    def wait_all_owned(self, bound_s: float = 60.0) -> dict[str, list[int]]:
        """Until every partition is owned by its preferred live node."""
        deadline = time.monotonic() + bound_s
        while True:
            owned = self.owned()
            if owned == self.preferred():
                return owned
            if time.monotonic() > deadline:
                raise AssertionError(f"partitions not all owned in {bound_s} s: {owned}")
            time.sleep(0.2)

    def close(self) -> None:
        for consumer in self.consumers:
            consumer.close()
        for server in self.servers.values():
            server.kill()
        if self.nats is not None:
            self.nats.stop()
