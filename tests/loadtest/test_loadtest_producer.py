"""timerwheel.loadtest.producer in isolation: its open loop over a fake transport (requests go out
on schedule whatever the answers, waits only at max_outstanding, stops at abort and
still reports what it sent) and the deterministic choice of what to cancel."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import grpc
import psutil

from timerwheel.client import TimerClient
from timerwheel.loadtest import producer as producer_module
from timerwheel.loadtest.accounting import SENT, UNKNOWN, UNSENT
from timerwheel.loadtest.pacing import decode_body
from timerwheel.loadtest.producer import MAX_REFUSALS, Producer, ProducerPlan, wants_cancel
from timerwheel.v1 import timerwheel_pb2 as pb


def test_wants_cancel_picks_about_the_share_deterministically():
    picked = [seq for seq in range(100_000) if wants_cancel(seq, 0.3)]
    assert 29_000 < len(picked) < 31_000
    assert picked == [seq for seq in range(100_000) if wants_cancel(seq, 0.3)]
    assert not any(wants_cancel(seq, 0.0) for seq in range(1_000))
    assert all(wants_cancel(seq, 1.0) for seq in range(1_000))


# == consumer tallies =======================================================================


# == the producer's open loop, over a fake transport ========================================
class FakeCall(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode) -> None:
        self._code = code

    def code(self) -> grpc.StatusCode:
        return self._code


class FakeFuture:
    """A SendBatch future the test answers when it chooses."""

    def __init__(self, request) -> None:
        self.request = request
        self._callbacks: list = []
        self._outcome = None

    def add_done_callback(self, callback) -> None:
        if self._outcome is None:
            self._callbacks.append(callback)
        else:
            callback(self)

    def answer(self, outcome) -> None:
        self._outcome = outcome
        for callback in self._callbacks:
            callback(self)

    def result(self):
        if isinstance(self._outcome, Exception):
            raise self._outcome
        return self._outcome


class FakeTransport:
    """Records each SendBatch future; `wait_issued(n)` waits (bounded) for n requests."""

    def __init__(self) -> None:
        self.futures: list[FakeFuture] = []
        self.auto_answer = False
        self.cond = threading.Condition()
        self.service = SimpleNamespace(
            SendBatch=SimpleNamespace(future=self.future), Send=SimpleNamespace(future=self.future)
        )

    def future(self, request, timeout):
        future = FakeFuture(request)
        with self.cond:
            self.futures.append(future)
            self.cond.notify_all()
            if self.auto_answer:
                future.answer(ok_response(future))
        return future

    def answer_all_from_now_on(self) -> None:
        with self.cond:
            self.auto_answer = True
            pending = [f for f in self.futures if f._outcome is None]
        for future in pending:
            future.answer(ok_response(future))

    def wait_issued(self, count: int) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: len(self.futures) >= count, timeout=10)


def producer_plan(**changes) -> ProducerPlan:
    plan = dict(
        index=0, producers=1, target="unused", messages=1_000, rate=100_000, batch=100,
        topics=("t",), body_bytes=16, delay_ms=(1_000, 2_000), burst_offset_ms=0,
        burst_window_ms=0, cancel_share=0.0, max_outstanding=64, rpc_timeout_s=5.0, seed=1,
    )  # fmt: skip
    plan.update(changes)
    return ProducerPlan(**plan)


def ok_response(future: FakeFuture):
    if isinstance(future.request, pb.SendRequest):  # batch 1: a unary Send
        return pb.SendResponse(message_id="m")
    return pb.SendBatchResponse(
        results=[pb.SendResponse(message_id=f"m{i}") for i in range(len(future.request.messages))]
    )


def start_producer(
    plan: ProducerPlan, transport: FakeTransport, abort: threading.Event | None = None
) -> tuple[Producer, threading.Thread]:
    producer = Producer(plan, transport)
    abort = abort or threading.Event()
    thread = threading.Thread(
        target=producer.run, args=(time.monotonic_ns(), 1_000_000, abort, lambda sent: None)
    )
    thread.start()
    return producer, thread


def test_producer_keeps_sending_on_schedule_while_nothing_is_answered():
    transport = FakeTransport()
    producer, thread = start_producer(producer_plan(), transport)
    assert transport.wait_issued(10)  # all 10 requests out, not one answered yet
    bodies = [m.body for f in transport.futures for m in f.request.messages]
    assert [decode_body(b) for b in bodies] == [(0, seq) for seq in range(1_000)]
    for index, future in enumerate(transport.futures):
        refused = FakeCall(grpc.StatusCode.INVALID_ARGUMENT)  # (RESOURCE_EXHAUSTED: retried)
        unknown = FakeCall(grpc.StatusCode.DEADLINE_EXCEEDED)
        future.answer({3: refused, 4: unknown}.get(index) or ok_response(future))
    thread.join(timeout=10)
    assert not thread.is_alive()
    result = producer.result()
    states = result["states"]
    assert states[:300] == bytes([SENT]) * 300 and states[300:400] == bytes([UNSENT]) * 100
    assert states[400:500] == bytes([UNKNOWN]) * 100 and states[500:] == bytes([SENT]) * 500
    assert result["sent"] == 800
    assert result["errors"] == {"send_INVALID_ARGUMENT": 100, "send_DEADLINE_EXCEEDED": 100}
    assert producer.latency_us.get_total_count() == 8


def test_a_producer_behind_schedule_stops_at_abort_and_still_reports_what_it_sent():
    # The `--batch 1 --rate 8000` case: every request is overdue, so pacing never waits;
    # abort must still stop it, and what was answered stays counted (not "sent 0").
    transport = FakeTransport()
    abort = threading.Event()
    plan = producer_plan(messages=10_000, batch=1, rate=1_000_000, max_outstanding=5)
    producer, thread = start_producer(plan, transport, abort)
    assert transport.wait_issued(5)  # all slots taken, the producer is behind schedule
    for future in transport.futures[:3]:
        future.answer(ok_response(future))
    abort.set()
    transport.answer_all_from_now_on()
    thread.join(timeout=10)
    assert not thread.is_alive()
    result = producer.result()
    assert result["aborted"] is True
    assert result["sent"] == len(transport.futures) < 10_000  # stopped long before the end
    assert result["states"].count(SENT) == result["sent"]


def test_producer_waits_only_at_max_outstanding_and_counts_the_wait_as_latency():
    transport = FakeTransport()
    producer, thread = start_producer(producer_plan(max_outstanding=3), transport)
    assert transport.wait_issued(3)
    waited = threading.Event()
    assert not waited.wait(0.2)  # a bounded look: the 4th must not go while 3 are open
    assert len(transport.futures) == 3
    transport.futures[0].answer(ok_response(transport.futures[0]))
    assert transport.wait_issued(4)  # one answer frees one slot: the next request goes
    transport.answer_all_from_now_on()
    thread.join(timeout=10)
    assert not thread.is_alive() and producer.result()["sent"] == 1_000
    # Request 4 was due at 3 ms (a request a ms) but went out after the 0.2 s look, which
    # began once the first three were out: its latency from the intended time carries
    # that wait, at least 200 - 3 ms of it; the send-to-answer latency does not.
    assert producer.intended_us.get_max_value() >= 197_000
    assert producer.max_lag_ms >= 197


# == the producer: RESOURCE_EXHAUSTED is backpressure ==========================================
def test_a_refused_request_is_sent_again_with_the_same_messages_and_counted_as_retried():
    transport = FakeTransport()
    plan = producer_plan(messages=300, batch=100)
    producer, thread = start_producer(plan, transport)
    assert transport.wait_issued(3)
    refused = transport.futures[1]
    for future in transport.futures[:3]:
        outcome = FakeCall(grpc.StatusCode.RESOURCE_EXHAUSTED) if future is refused else None
        future.answer(outcome or ok_response(future))
    assert transport.wait_issued(4)  # the refused one again, after its backoff
    again = transport.futures[3]
    assert again.request == refused.request  # the same messages, the same sequence numbers
    transport.answer_all_from_now_on()
    thread.join(timeout=10)
    assert not thread.is_alive()
    result = producer.result()
    assert result["sent"] == 300 and result["states"] == bytes([SENT]) * 300
    assert result["refused_retried"] == 100 and result["errors"] == {}


def test_refusals_are_retried_a_bounded_number_of_times_then_counted_refused(monkeypatch):
    monkeypatch.setattr(producer_module, "REFUSED_MAX_S", 0.001)  # the count, not the waits
    transport = FakeTransport()
    producer, thread = start_producer(producer_plan(messages=1, batch=1), transport)
    for attempt in range(MAX_REFUSALS + 1):
        assert transport.wait_issued(attempt + 1)
        transport.futures[attempt].answer(FakeCall(grpc.StatusCode.RESOURCE_EXHAUSTED))
    thread.join(timeout=60)
    assert not thread.is_alive()
    assert len(transport.futures) == MAX_REFUSALS + 1
    result = producer.result()
    assert result["states"] == bytes([UNSENT]) and result["errors"] == {
        "send_RESOURCE_EXHAUSTED": 1
    }
    assert result["refused_retried"] == MAX_REFUSALS


def test_a_refusal_after_the_stop_is_not_retried():
    transport = FakeTransport()
    abort = threading.Event()
    producer, thread = start_producer(producer_plan(messages=100, batch=100), transport, abort)
    assert transport.wait_issued(1)
    abort.set()
    transport.futures[0].answer(FakeCall(grpc.StatusCode.RESOURCE_EXHAUSTED))
    thread.join(timeout=10)
    assert not thread.is_alive() and len(transport.futures) == 1
    assert producer.result()["errors"] == {"send_RESOURCE_EXHAUSTED": 100}


# == over a real server ======================================================================
def test_a_producer_with_three_connections_sends_over_three_tcp_connections(server):
    """Requests take turns on the connections: each of the three is opened (a channel
    connects at its first call) and every send is stored."""
    plan = producer_plan(target=server.target, messages=9, batch=1, rate=1_000, connections=3)
    port = int(server.target.rsplit(":", 1)[1])
    client = TimerClient(server.target, connections=plan.connections)
    try:
        producer = Producer(plan, client)
        start_ms = time.time_ns() // 1_000_000
        producer.run(time.monotonic_ns(), start_ms, threading.Event(), lambda sent: None)
        to_server = [
            c for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        ]  # fmt: skip
        assert len(to_server) == 3
        assert producer.result()["sent"] == 9
    finally:
        client.close()
