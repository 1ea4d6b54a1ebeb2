"""What `bench.cluster_cost` reads besides CPU and latency: how each node's hub and
delivery gate stood at the end of the drain, and the consumers' Ack calls."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
import psutil

from timerwheel.client import TimerClient
from timerwheel.server.forwarding import FORWARDED
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

if TYPE_CHECKING:
    from bench.cluster_cost import Load, Target

TOPIC = "cost"


def hub_state(target: Target, clustered: bool) -> dict:
    """What the node's hub says of the topic: its consumers' in-flight counts and the
    topic's lag (fired un-acked, of those in flight), from that node alone."""
    metadata = [(FORWARDED, "1")] if clustered else None
    try:
        with TimerClient(target.address, timeout_s=10) as client:
            stub = pb_grpc.TimerAdminStub(client.channel)
            answer = stub.Consumers(pb.ConsumersRequest(topic=TOPIC), metadata=metadata,
                                    timeout=10)  # fmt: skip
    except grpc.RpcError as error:
        return {"error": str(error.code())}
    lag = answer.lag[0] if answer.lag else pb.TopicLag()
    return {
        "consumers_in_flight": [c.in_flight for c in answer.consumers],
        "fired_unacked": lag.fired_unacked, "in_flight": lag.in_flight,
    }  # fmt: skip


def gate_stats(log: Path) -> dict:
    """A node's delivery gate (`timerwheel.cluster.gate_state`): its closings, from the
    last `cluster_delivery_reopened` line of its log (none: it never closed and reopened)."""
    last: dict = {}
    try:
        lines = log.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        if "cluster_delivery_reopened" not in line:
            continue
        try:
            event = json.loads(line)
        except ValueError:
            continue
        last = {k: event[k] for k in ("closures", "closed_ms", "longest_closed_ms",
                                      "refused_fetches", "reasons") if k in event}  # fmt: skip
    return last or {"closures": 0, "closed_ms": 0}


class NodeAcks:
    """The Ack calls of one consumer stream, on this node only (marked forwarded in a
    cluster); what an Ack answered counts as received."""

    def __init__(self, load: Load, stub: pb_grpc.TimerServiceStub, node: str) -> None:
        self.load, self.stub, self.node = load, stub, node

    def ack(self, topic: str, ids: list[str]) -> int:
        if not ids:
            return 0
        load = self.load
        began = time.monotonic()
        try:
            answer = self.stub.Ack(pb.AckRequest(topic=topic, message_ids=ids),
                                   metadata=load.metadata, timeout=10)  # fmt: skip
        except grpc.RpcError as error:
            load.errors.append(f"ack {self.node}: {error.code()}")
            return 0
        with load.lock:
            load.received.update(ids)
            load.acks += 1
            load.ack_s += time.monotonic() - began
        return answer.acked

    def nack(self, topic: str, ids: list[str], reason: str = "") -> None:
        raise NotImplementedError("the bench's consumer only acks")


def cpu_seconds(pid: int) -> float:
    """User + system CPU of `pid` and every child it has now."""
    try:
        proc = psutil.Process(pid)
        procs = [proc, *proc.children(recursive=True)]
    except psutil.Error:
        return 0.0
    total = 0.0
    for p in procs:
        try:
            times = p.cpu_times()
            total += times.user + times.system
        except psutil.Error:
            pass
    return total


def states_of(target: str, ids: list[str]) -> dict[str, int]:
    """How many of `ids` the cluster holds in each state (or which error a Get gets)."""
    tally: dict[str, int] = {}
    with TimerClient(target, timeout_s=10) as client:
        for message_id in ids:
            try:
                name = client.get(message_id, include_body=False).state.name
            except Exception as error:  # any refusal: the tally names it
                name = f"error {getattr(error, 'code', type(error).__name__)}"
            tally[name] = tally.get(name, 0) + 1
    return tally
