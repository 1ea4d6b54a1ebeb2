"""`timerwheel loadtest --scenario failover`: the fault suite's figures, measured on a
cluster the user started, with the user's own fault.

The run, all in this process (a cluster's failover is measured at a few hundred sends a
second, which threads carry; the other scenarios' worker processes are for throughput):

1. one sender thread per `--target` node, each its share of the scenario's rate, SendBatch
   with client ids (`lt-<run>-<producer>-<seq>`): a batch that fails UNAVAILABLE, or meets
   a dead node, a deadline or a partition that has no owner yet, is sent again, same ids,
   to the next node, until it is answered or `SEND_BUDGET_S` has passed. The ids make
   the retry idempotent, so a batch stored before its answer was lost is stored once;
2. one consumer stream per node and topic, subscribed as a relaying node does (marked
   `timerwheel-forwarded`), so each stream gets the deliveries of its own node only. A
   fanned-in stream on node A would also hold node B's deliveries, un-acked on B until
   A's relay notices A's own stream is gone; with a stream per node, a faulted node's
   stream holds that node's deliveries only, which its partitions' new owner fires again
   anyway. Every stream acks what it gets on the node that delivered it and subscribes
   again (backoff up to 2 s) after an error: the faulted node's until the end;
3. Stats pollers on every node (loadtest.failover_watch) from the start;
4. at `--fault-at` the user's command runs in a shell, bounded in time;
5. after the send phase, the wait for every acknowledged timer (up to the drain timeout
   after the last deliver time), then the accounting of the other scenarios
   (loadtest.accounting), and the failover figures (loadtest.failover_report).

The stream per node means every node must be a `--target`: a partition owned by a node
not listed would be fired to nobody, so the run refuses to start when Stats names an
owner at an address that is not a target.
"""

from __future__ import annotations

import dataclasses
import os
import random
import secrets
import threading
import time
from collections import Counter

import grpc

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.credentials import PLAIN, Connection
from timerwheel.loadtest.accounting import SENT, UNKNOWN, UNSENT, account
from timerwheel.loadtest.failover_report import figures
from timerwheel.loadtest.failover_watch import Fault, Watch, check_nodes, now_ms, ownership
from timerwheel.loadtest.pacing import decode_body, encode_body, padding_for, split_messages
from timerwheel.loadtest.scenarios import MINUTE_MS, Scenario, ScenarioError
from timerwheel.server.forwarding import FORWARDED
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb

FAILOVER = Scenario(
    "failover", "a fault (--fault) on a running cluster (--target, every node) mid-run",
    rate=300, duration_s=40.0, batch=20, producers=2, consumers=1, topics=1,
    delay_min_ms=500, delay_max_ms=4_000, grace_ms=2_000, drain_timeout_ms=2 * MINUTE_MS,
    rpc_timeout_s=5.0,
)  # fmt: skip
DEFAULT_FAULT_AT_MS = 20_000
SEND_BUDGET_S = 60.0  # a batch still unanswered by any node after this is UNKNOWN
RESUBSCRIBE_MAX_S = 2.0
TICK_S = 0.25


@dataclasses.dataclass(frozen=True)
class FailoverPlan:
    scenario: Scenario
    targets: tuple[str, ...]
    fault: str
    fault_at_ms: int = DEFAULT_FAULT_AT_MS
    connection: Connection = PLAIN

    def check(self) -> None:
        """Refuse a run that cannot measure a failover, naming the flag."""
        if len(self.targets) < 2:
            raise ScenarioError(
                "--target: the failover scenario needs every node of a running cluster, at "
                "least two, as HOST:PORT,HOST:PORT[,...]"
            )
        if not self.fault.strip():
            raise ScenarioError(
                "--fault: the failover scenario needs the fault to make, a shell command, "
                "e.g. --fault 'kill -9 $(cat /tmp/n2.pid)'"
            )
        if not 0 < self.fault_at_ms < self.scenario.duration_s * 1000:
            raise ScenarioError(
                f"--fault-at {self.fault_at_ms}ms: must fall inside the send phase "
                f"(--duration {self.scenario.duration_s:g}s)"
            )


@dataclasses.dataclass(frozen=True)
class Receipt:
    node: int  # index of the target whose stream got it
    producer: int
    seq: int
    message_id: str
    deliver_at_ms: int
    fired_at_ms: int
    received_ms: int


class Sender:
    """One producer: its share of the messages, paced, each batch retried node to node."""

    def __init__(self, index: int, run: FailoverRun) -> None:
        scenario = run.scenario
        self.index, self.run = index, run
        self.states = bytearray(split_messages(scenario.messages, len(run.targets), index))
        self.errors: Counter[str] = Counter()
        self.retried = 0  # batches sent again to another node
        self.node = index  # the node it sends to first (then the one that answered last)
        self.max_deliver_ms = 0
        self.rng = random.Random(int(run.run_id, 16) + index)
        self.thread = threading.Thread(target=self._run, name=f"send-{index}", daemon=True)

    def _run(self) -> None:
        run, scenario = self.run, self.run.scenario
        per_s = scenario.rate / len(run.targets)
        padding = padding_for(scenario.body_bytes)
        low, high = scenario.scaled_delay_ms
        for k, first in enumerate(range(0, len(self.states), scenario.batch)):
            wait_s = run.start_s + k * scenario.batch / per_s - time.monotonic()
            if run.abort.wait(max(wait_s, 0)):
                return
            count = min(scenario.batch, len(self.states) - first)
            now = now_ms()
            requests = []
            for seq in range(first, first + count):
                deliver_at_ms = now + self.rng.randint(low, high)
                self.max_deliver_ms = max(self.max_deliver_ms, deliver_at_ms)
                requests.append(pb.SendRequest(
                    topic=run.topics[seq % len(run.topics)],
                    body=encode_body(self.index, seq, padding),
                    deliver_at_ms=deliver_at_ms, message_id=run.message_id(self.index, seq),
                ))  # fmt: skip
            # A node forwards a SendBatch only when all its ids are one other node's, so
            # a batch goes out as one call per partition: each lands whole at its owner.
            groups: dict[int, list[tuple[int, pb.SendRequest]]] = {}
            for seq, request in zip(range(first, first + count), requests, strict=True):
                groups.setdefault(partition_of(request.message_id, run.partitions), []).append(
                    (seq, request)
                )
            for group in groups.values():
                state = self._send(pb.SendBatchRequest(messages=[r for _, r in group]))
                for seq, _ in group:
                    self.states[seq] = state

    def _send(self, request: pb.SendBatchRequest) -> int:
        run = self.run
        deadline = time.monotonic() + SEND_BUDGET_S
        # From the node that answered last: a stopped node costs one deadline, not one
        # a batch.
        node = start = self.node
        while True:
            client = run.clients[node % len(run.targets)]
            try:
                client.service.SendBatch(request, timeout=run.scenario.rpc_timeout_s)
                self.node = node % len(run.targets)
                return SENT
            except grpc.RpcError as error:
                code = error.code()
                self.errors[f"send_{code.name}"] += 1
                if code == grpc.StatusCode.INVALID_ARGUMENT:
                    return UNSENT  # refused as such on every node: stored nowhere
            node += 1
            self.retried += 1
            # Once round every node: wait a little (the partition has no owner yet).
            if (node - start) % len(run.targets) == 0 and run.abort.wait(0.2):
                return UNKNOWN
            if time.monotonic() > deadline:
                return UNKNOWN


class Receiver:
    """One node's stream of one topic (its own deliveries only), acking what it gets."""

    def __init__(self, node: int, topic: str, run: FailoverRun) -> None:
        self.node, self.topic, self.run = node, topic, run
        # Ids whose Ack call was answered, and ids whose call failed: a duplicate (two nodes
        # each held it fired, as at-least-once allows across a failover) is acked twice but
        # counts once, so the sum of the answers' counts would exceed what was sent.
        self.acked_ids: set[str] = set()
        self.failed_ids: set[str] = set()
        self.resubscribed = -1  # the first subscribe is not a resubscribe
        self.errors: Counter[str] = Counter()
        self.call = None
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, name=f"recv-{node}", daemon=True)

    def _run(self) -> None:
        run, backoff_s = self.run, 0.1
        client = run.clients[self.node]
        request = pb.SubscribeRequest(topic=self.topic, max_in_flight=run.scenario.max_in_flight)
        while not run.stop.is_set():
            with self.lock:
                if run.stop.is_set():
                    return
                self.call = client.service.Subscribe(request, metadata=[(FORWARDED, "1")])
                self.resubscribed += 1
            try:
                for batch in self.call:
                    self._take(client, batch)
                    backoff_s = 0.1
            except grpc.RpcError as error:
                self.errors[f"stream_{error.code().name}"] += 1
            if run.stop.wait(backoff_s):
                return
            backoff_s = min(backoff_s * 2, RESUBSCRIBE_MAX_S)

    def _take(self, client: TimerClient, batch) -> None:
        received_ms = now_ms()
        receipts = []
        for d in batch.deliveries:
            identity = decode_body(d.body)
            if identity is not None:
                receipts.append(Receipt(
                    self.node, *identity, d.message_id, d.deliver_at_ms, d.fired_at_ms,
                    received_ms,
                ))  # fmt: skip
        self.run.record(receipts)
        ids = [d.message_id for d in batch.deliveries]
        try:
            client.ack(self.topic, ids)
            self.acked_ids.update(ids)
        except RemoteError as error:
            self.errors[f"ack_{error.code.name}"] += 1
            self.failed_ids.update(ids)

    def stop(self) -> None:
        with self.lock:
            if self.call is not None:
                self.call.cancel()
        self.thread.join(self.run.scenario.rpc_timeout_s + 5)


class FailoverRun:
    def __init__(self, plan: FailoverPlan, partitions: int) -> None:
        self.plan = plan
        self.partitions = partitions
        self.scenario = plan.scenario
        self.targets = plan.targets
        self.run_id = secrets.token_hex(4)
        self.topics = tuple(f"lt-{self.run_id}-{i}" for i in range(self.scenario.topics))
        tls, token = plan.connection.tls, plan.connection.token
        self.clients = [
            TimerClient(t, timeout_s=self.scenario.rpc_timeout_s, tls=tls, token=token)
            for t in self.targets
        ]
        self.abort = threading.Event()  # senders: stop now
        self.stop = threading.Event()  # receivers: stop
        self.start_s = 0.0
        self.lock = threading.Lock()
        self.receipts: list[Receipt] = []
        self.seen: set[tuple[int, int]] = set()

    def message_id(self, producer: int, seq: int) -> str:
        return f"lt-{self.run_id}-{producer}-{seq}"

    def record(self, receipts: list[Receipt]) -> None:
        with self.lock:
            self.receipts.extend(receipts)
            self.seen.update((r.producer, r.seq) for r in receipts)

    def execute(self, progress=None) -> dict:
        load_before = os.getloadavg()
        watch = Watch(self.targets, self.plan.connection).start()
        senders = [Sender(i, self) for i in range(len(self.targets))]
        receivers = [Receiver(n, t, self) for n in range(len(self.targets)) for t in self.topics]
        fault = Fault(self.plan.fault)
        try:
            for receiver in receivers:
                receiver.thread.start()
            self.start_s = time.monotonic() + 0.5
            for sender in senders:
                sender.thread.start()
            fault_s = self.start_s + self.plan.fault_at_ms / 1000
            if not self.abort.wait(max(fault_s - time.monotonic(), 0)):
                fault.run()
            budget_s = self.scenario.duration_s + SEND_BUDGET_S + 30
            for sender in senders:
                sender.thread.join(max(self.start_s + budget_s - time.monotonic(), 1))
            self._drain(senders)
        finally:
            self.abort.set()
            self.stop.set()
            for receiver in receivers:
                receiver.stop()
            watch.stop()
        end_ms = now_ms()
        held = self._server_held()
        try:
            return self._figures(senders, receivers, watch, fault, held, load_before, end_ms)
        finally:
            for client in self.clients:
                client.close()

    def _drain(self, senders: list[Sender]) -> None:
        """Until every acknowledged timer arrived, bounded after the last deliver time."""
        scenario = self.scenario
        last_ms = max((s.max_deliver_ms for s in senders), default=now_ms())
        settle_ms, give_up_ms = last_ms + scenario.grace_ms, last_ms + scenario.drain_timeout_ms
        acknowledged = {
            (s.index, seq) for s in senders for seq, state in enumerate(s.states) if state == SENT
        }
        while now_ms() < give_up_ms:
            with self.lock:
                missing = len(acknowledged - self.seen)
            if missing == 0 and now_ms() >= settle_ms:
                return
            time.sleep(TICK_S)  # a poll of the receipts, bounded by give_up_ms

    def _server_held(self) -> int | None:
        """What a live node says the cluster still holds in the run's topics (scheduled, or
        fired and un-acked): late, not lost. None when no node answers for the whole
        cluster."""
        for client in self.clients:
            try:
                held = sum(client.count(topic).pending for topic in self.topics)
                mine = set(self.topics)
                held += sum(t.fired_unacked for t in client.topics() if t.topic in mine)
                return held
            except RemoteError:
                continue
        return None

    def _figures(self, senders, receivers, watch, fault, held, load_before, end_ms) -> dict:
        states = {s.index: bytes(s.states) for s in senders}
        with self.lock:
            receipts = list(self.receipts)
        counts = {s.index: bytearray(len(s.states)) for s in senders}
        early = 0
        for r in receipts:
            row = counts.get(r.producer)
            if row is not None and r.seq < len(row) and row[r.seq] < 255:
                row[r.seq] += 1
            early += r.received_ms < r.deliver_at_ms
        acked_ids = set().union(*(r.acked_ids for r in receivers))
        acked = len(acked_ids)
        unknown = len(set().union(*(r.failed_ids for r in receivers)) - acked_ids)
        failed = fault.exit_status != 0
        errors = [f"fault command exit status {fault.exit_status}"] if failed else []
        accounting = account(
            states, {p: bytes(c) for p, c in counts.items()}, acked=acked, early=early,
            expect_delivery=True, errors=errors,
            ack_unknown=unknown,
        )  # fmt: skip
        if held is not None:
            accounting.count_server_held(held)
        return figures(
            self, accounting, receipts, ownership(watch.snapshot(), fault), fault,
            senders=senders, receivers=receivers, load=(load_before, os.getloadavg()),
            end_ms=end_ms,
        )  # fmt: skip


def run(plan: FailoverPlan) -> dict:
    plan.check()
    partitions = check_nodes(plan.targets, plan.connection)
    return FailoverRun(plan, partitions).execute()
