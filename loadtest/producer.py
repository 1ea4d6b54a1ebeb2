"""One producer process: sends its share of the messages on the open-loop schedule.

The main thread waits for each request's intended time (`Pacer.due_ns`), builds it and
fires it as a gRPC *future* (SendBatch, or Send when the batch size is 1); the answer is
handled by a callback on a gRPC thread. So a slow answer never delays the next send:
only `max_outstanding` unanswered requests stop the producer, and then the lateness
shows in the latency measured from the intended time (`intended_us`).

Each sequence number's outcome goes into `states` (see `timerwheel.loadtest.accounting`). With a
`cancel_share`, a deterministic share of the stored timers is cancelled right after the
send is answered, from a thread of its own (Cancel is a unary call per message).
"""

from __future__ import annotations

import queue
import random
import resource
import threading
import time
from collections import Counter
from dataclasses import dataclass

import grpc

from timerwheel.client import TimerClient
from timerwheel.credentials import PLAIN, Connection
from timerwheel.loadtest.accounting import (
    CANCEL_UNKNOWN,
    CANCELLED,
    HIGHEST_US,
    SENT,
    UNKNOWN,
    UNSENT,
    new_histogram,
)
from timerwheel.loadtest.pacing import (
    DeliverTimes,
    Pacer,
    encode_body,
    padding_for,
    use_measuring_switch_interval,
)
from timerwheel.v1 import timerwheel_pb2 as pb

# Codes after which the server certainly stored nothing (a batch is all or none).
REFUSED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.UNIMPLEMENTED,
    }
)
MAX_CANCELS_IN_FLIGHT = 64
# RESOURCE_EXHAUSTED is backpressure (the server stored nothing): the same request is sent
# again after a backoff, from REFUSED_FIRST_S doubling to REFUSED_MAX_S, at most
# MAX_REFUSALS times (about half a minute), while the producer's window holds its slot.
REFUSED_FIRST_S = 0.01
REFUSED_MAX_S = 1.0
MAX_REFUSALS = 40
CANCEL_HASH = 2_654_435_761  # Knuth's multiplicative hash: spreads seqs over 0..2^32


def wants_cancel(seq: int, share: float) -> bool:
    """Whether message `seq` is one of the `share` to cancel (deterministic, well spread)."""
    return (seq * CANCEL_HASH) % 2**32 < share * 2**32


@dataclass(frozen=True)
class ProducerPlan:
    index: int
    producers: int
    target: str
    messages: int  # this producer's share
    rate: int  # all producers together
    batch: int
    topics: tuple[str, ...]
    body_bytes: int
    delay_ms: tuple[int, int]
    burst_offset_ms: int  # > 0: burst, due at start_wall_ms + offset + U[0, window)
    burst_window_ms: int
    cancel_share: float
    max_outstanding: int
    rpc_timeout_s: float
    seed: int
    connection: Connection = PLAIN  # TLS and token for a secured server
    threads: int = 0  # > 0: TDMQ's shape, single sends from threads (see run_threads)
    connections: int = 1  # the send loop's requests go round-robin over this many


class Producer:
    def __init__(self, plan: ProducerPlan, client: TimerClient) -> None:
        """`client` was opened with `plan.connections`: its requests take turns on them."""
        self.plan = plan
        self.client = client
        self.states = bytearray(plan.messages)
        self.lock = threading.Lock()
        self.slots = threading.Semaphore(plan.max_outstanding)
        self.latency_us = new_histogram(HIGHEST_US)  # request sent -> answered
        self.intended_us = new_histogram(HIGHEST_US)  # intended send time -> answered
        self.errors: Counter[str] = Counter()
        self.sent = 0
        self.cancel_too_late = 0
        self.min_deliver_ms = 0
        self.max_deliver_ms = 0
        self.max_lag_ms = 0  # how far behind its intended time a request went out
        self.last_done_ns = 0
        self.aborted = False  # told to stop before its schedule was through
        self.cancels: queue.SimpleQueue[tuple[int, str] | None] = queue.SimpleQueue()
        self.cancel_slots = threading.Semaphore(MAX_CANCELS_IN_FLIGHT)
        self.refused_retried = 0  # messages of requests refused RESOURCE_EXHAUSTED, sent again
        self.retries: queue.PriorityQueue[tuple[float, int, tuple]] = queue.PriorityQueue()
        self._retry_order = 0
        self._abort: threading.Event | None = None

    # -- the send loop (main thread) -------------------------------------------------------
    def run(self, start_ns: int, start_wall_ms: int, abort, on_progress) -> None:
        plan = self.plan
        if plan.threads:
            self.run_threads(start_ns, start_wall_ms, abort, on_progress)
            return
        rng = random.Random(plan.seed)
        pacer = Pacer(start_ns, plan.rate, plan.batch, plan.producers, plan.index)
        burst_at_ms = start_wall_ms + plan.burst_offset_ms if plan.burst_offset_ms else 0
        deliver = DeliverTimes(*plan.delay_ms, burst_at_ms, plan.burst_window_ms)
        padding = padding_for(plan.body_bytes)
        canceller = threading.Thread(target=self._cancel_loop, name="canceller", daemon=True)
        canceller.start()
        self._abort = abort
        retrier = threading.Thread(target=self._retry_loop, name="retrier", daemon=True)
        retrier.start()
        try:
            for k, first in enumerate(range(0, plan.messages, plan.batch)):
                if abort.is_set():  # behind schedule, pacing never waits: check here too
                    self.aborted = True
                    break
                due_ns = pacer.due_ns(k)
                wait_ns = due_ns - time.monotonic_ns()
                if wait_ns > 0 and abort.wait(wait_ns / 1e9):  # pacing, and abortable
                    self.aborted = True
                    break
                if not self.slots.acquire(timeout=plan.rpc_timeout_s * 2):
                    self.errors["producer_stalled"] += 1
                    break
                count = min(plan.batch, plan.messages - first)
                requests = self._requests(first, count, rng, deliver, padding)
                sent_ns = time.monotonic_ns()
                self.max_lag_ms = max(self.max_lag_ms, (sent_ns - due_ns) // 1_000_000)
                self._send_attempt((first, count, due_ns, sent_ns, requests, 0))
                on_progress(self.sent)
            self._await_outstanding()
        finally:
            self.cancels.put(None)
            self.retries.put((float("inf"), 0, ()))
            canceller.join(timeout=plan.rpc_timeout_s * 2)
            retrier.join(timeout=plan.rpc_timeout_s * 2)
        on_progress(self.sent)

    def _send_attempt(self, attempt: tuple) -> None:
        """Send (again) one request: (first seq, count, intended ns, first sent ns, the
        requests, refusals so far); its latency counts from the first attempt."""
        future = self._send(attempt[4])
        future.add_done_callback(lambda f, a=attempt: self._done(f, *a))

    def _retry_loop(self) -> None:
        """Sends refused requests again when their backoff is over, in that order."""
        while True:
            at, _, attempt = self.retries.get()
            if not attempt:
                return
            wait_s = at - time.monotonic()
            if wait_s > 0:
                time.sleep(wait_s)  # one queued meanwhile waits at most REFUSED_MAX_S more
            self._send_attempt(attempt)

    def run_threads(self, start_ns: int, start_wall_ms: int, abort, on_progress) -> None:
        """TDMQ's producer shape: `threads` threads, each calling `send()` with one message
        at a time on timerwheel's batching producer (`client.producer()`), which packs
        concurrent sends into SendBatch calls. Same open-loop schedule as `run` with a
        batch of 1: thread t sends this process's messages t, t + threads, ..."""
        plan = self.plan
        pacer = Pacer(start_ns, plan.rate, 1, plan.producers, plan.index)
        burst_at_ms = start_wall_ms + plan.burst_offset_ms if plan.burst_offset_ms else 0
        deliver = DeliverTimes(*plan.delay_ms, burst_at_ms, plan.burst_window_ms)
        padding = padding_for(plan.body_bytes)

        def send_loop(thread: int, batching) -> None:
            rng = random.Random(plan.seed * 1_000 + thread)
            for seq in range(thread, plan.messages, plan.threads):
                due_ns = pacer.due_ns(seq)
                wait_ns = due_ns - time.monotonic_ns()
                if abort.is_set() or (wait_ns > 0 and abort.wait(wait_ns / 1e9)):
                    self.aborted = True
                    return
                if not self.slots.acquire(timeout=plan.rpc_timeout_s * 2):
                    with self.lock:
                        self.errors["producer_stalled"] += 1
                    return
                with self.lock:
                    [request] = self._requests(seq, 1, rng, deliver, padding)
                sent_ns = time.monotonic_ns()
                future = batching.send(
                    request.topic, request.body, deliver_at_ms=request.deliver_at_ms
                )
                future.add_done_callback(
                    lambda f, a=seq, d=due_ns, s=sent_ns: self._done_single(f, a, d, s)
                )
                if thread == 0:
                    on_progress(self.sent)

        canceller = threading.Thread(target=self._cancel_loop, name="canceller", daemon=True)
        canceller.start()
        try:
            with self.client.producer(linger_ms=2, max_batch=500) as batching:
                senders = [
                    threading.Thread(target=send_loop, args=(t, batching), name=f"send-{t}")
                    for t in range(plan.threads)
                ]
                for sender in senders:
                    sender.start()
                for sender in senders:
                    sender.join()
            self._await_outstanding()
        finally:
            self.cancels.put(None)
            canceller.join(timeout=plan.rpc_timeout_s * 2)
        on_progress(self.sent)

    def _done_single(self, future, seq: int, due_ns: int, sent_ns: int) -> None:
        """The answer to one `send()` of `run_threads` (a SendResult or a RemoteError)."""
        error = future.exception()
        if error is None:
            self._record(seq, 1, SENT, None, [future.result().message_id], due_ns, sent_ns)
        else:
            code = getattr(error, "code", grpc.StatusCode.UNKNOWN)
            state = UNSENT if code in REFUSED else UNKNOWN
            self._record(seq, 1, state, code, [], due_ns, sent_ns)

    def _requests(self, first: int, count: int, rng, deliver: DeliverTimes, padding: bytes):
        plan, topics = self.plan, self.plan.topics
        now_ms = time.time_ns() // 1_000_000
        requests = []
        for seq in range(first, first + count):
            deliver_at_ms = deliver.sample(rng, now_ms)
            self.max_deliver_ms = max(self.max_deliver_ms, deliver_at_ms)
            self.min_deliver_ms = min(self.min_deliver_ms or deliver_at_ms, deliver_at_ms)
            requests.append(
                pb.SendRequest(
                    topic=topics[seq % len(topics)],
                    body=encode_body(plan.index, seq, padding),
                    deliver_at_ms=deliver_at_ms,
                )
            )
        return requests

    def _send(self, requests: list[pb.SendRequest]) -> grpc.Future:
        timeout = self.plan.rpc_timeout_s
        service = self.client.service  # the next connection's (timerwheel.connections)
        if len(requests) == 1:
            return service.Send.future(requests[0], timeout=timeout)
        return service.SendBatch.future(pb.SendBatchRequest(messages=requests), timeout=timeout)

    def _await_outstanding(self) -> None:
        """Every slot back = every request answered (bounded by the RPC deadline)."""
        deadline = time.monotonic() + self.plan.rpc_timeout_s + 10
        for _ in range(self.plan.max_outstanding):
            if not self.slots.acquire(timeout=max(deadline - time.monotonic(), 0.1)):
                self.errors["unanswered_at_end"] += 1
                return

    # -- answers (gRPC callback threads) ---------------------------------------------------
    def _done(
        self, future: grpc.Future, first: int, count: int, due_ns: int, sent_ns: int,
        requests: list | None = None, refusals: int = 0,
    ):  # fmt: skip
        code = None
        try:
            response = future.result()
            ids = [response.message_id] if count == 1 else [r.message_id for r in response.results]
            state = SENT
        except grpc.RpcError as error:
            ids, code = [], error.code()
            if self._backs_off(code, refusals) and requests is not None:
                self._retry_later((first, count, due_ns, sent_ns, requests, refusals + 1))
                return  # its slot stays taken: the producer's window feels the excess
            state = UNSENT if code in REFUSED else UNKNOWN
        self._record(first, count, state, code, ids, due_ns, sent_ns)

    def _backs_off(self, code, refusals: int) -> bool:
        """Refused for backpressure, retries left, and the producer not told to stop."""
        if self._abort is not None and self._abort.is_set():
            return False
        return code == grpc.StatusCode.RESOURCE_EXHAUSTED and refusals < MAX_REFUSALS

    def _retry_later(self, attempt: tuple) -> None:
        refusals = attempt[5]
        backoff_s = min(REFUSED_FIRST_S * 2 ** (refusals - 1), REFUSED_MAX_S)
        backoff_s *= 0.8 + 0.4 * random.random()  # producers refused together spread out
        with self.lock:
            self.refused_retried += attempt[1]
            self._retry_order += 1
            order = self._retry_order
        self.retries.put((time.monotonic() + backoff_s, order, attempt))

    def _record(self, first, count, state, code, ids, due_ns: int, sent_ns: int) -> None:
        """Account one answered request: states, latencies, errors, cancels to make."""
        done_ns = time.monotonic_ns()
        with self.lock:
            self.states[first : first + count] = bytes([state]) * count
            if state == SENT:
                self.sent += count
                self.latency_us.record_value(min((done_ns - sent_ns) // 1000, HIGHEST_US))
                self.intended_us.record_value(min((done_ns - due_ns) // 1000, HIGHEST_US))
            else:
                self.errors[f"send_{code.name}"] += count
            self.last_done_ns = max(self.last_done_ns, done_ns)
        share = self.plan.cancel_share
        for offset, message_id in enumerate(ids):
            if share and wants_cancel(first + offset, share):
                self.cancels.put((first + offset, message_id))
        self.slots.release()

    # -- cancels (a thread of their own) ---------------------------------------------------
    def _cancel_loop(self) -> None:
        timeout = self.plan.rpc_timeout_s
        while (item := self.cancels.get()) is not None:
            seq, message_id = item
            if not self.cancel_slots.acquire(timeout=timeout * 2):
                self.errors["cancel_stalled"] += 1
                continue
            future = self.client.service.Cancel.future(
                pb.CancelRequest(message_id=message_id), timeout=timeout
            )
            future.add_done_callback(lambda f, s=seq: self._cancelled(f, s))
        for _ in range(MAX_CANCELS_IN_FLIGHT):  # wait for the last answers
            if not self.cancel_slots.acquire(timeout=timeout + 10):
                self.errors["cancel_unanswered"] += 1
                return

    def _cancelled(self, future: grpc.Future, seq: int) -> None:
        try:
            state = pb.State.Name(future.result().state)
            outcome = CANCELLED if state == "CANCELLED" else CANCEL_UNKNOWN
        except grpc.RpcError as error:
            too_late = error.code() == grpc.StatusCode.FAILED_PRECONDITION  # already fired
            outcome = SENT if too_late else CANCEL_UNKNOWN
            with self.lock:
                self.cancel_too_late += too_late
                self.errors[f"cancel_{error.code().name}"] += not too_late
        with self.lock:
            self.states[seq] = outcome
        self.cancel_slots.release()

    def result(self) -> dict:
        usage = resource.getrusage(resource.RUSAGE_SELF)
        with self.lock:
            return {
                "role": "producer",
                "index": self.plan.index,
                "states": bytes(self.states),
                "sent": self.sent,
                "latency_us": self.latency_us.encode(),
                "intended_us": self.intended_us.encode(),
                "errors": {k: v for k, v in self.errors.items() if v},
                "cancel_too_late": self.cancel_too_late,
                "refused_retried": self.refused_retried,
                "min_deliver_ms": self.min_deliver_ms,
                "max_deliver_ms": self.max_deliver_ms,
                "max_lag_ms": self.max_lag_ms,
                "last_done_ns": self.last_done_ns,
                "aborted": self.aborted,
                "cpu_s": usage.ru_utime + usage.ru_stime,
            }


def producer_main(plan: ProducerPlan, channels) -> None:
    """Process entry point: connect, say ready, wait for the start, send, report."""
    use_measuring_switch_interval()
    client = TimerClient(
        plan.target, timeout_s=plan.rpc_timeout_s,
        tls=plan.connection.tls, token=plan.connection.token, connections=plan.connections,
    )  # fmt: skip
    try:
        client.wait_ready(timeout_s=30)
        producer = Producer(plan, client)
        channels.results.put(("ready", "producer", plan.index))
        if channels.go.wait(timeout=120) and not channels.abort.is_set():
            start_ns, start_wall_ms = channels.start[0], channels.start[1]

            def progress(sent: int, slot: int = plan.index) -> None:
                channels.progress[slot] = sent

            producer.run(start_ns, start_wall_ms, channels.abort, progress)
        channels.results.put(("result", "producer", producer.result()))
    except Exception as exc:  # reported to the harness, which fails the run
        channels.results.put(("error", "producer", f"producer {plan.index}: {exc!r}"))
    finally:
        client.close()
