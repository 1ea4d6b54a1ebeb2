"""Fair limits of a gRPC process: request bytes in flight, Subscribe streams per caller,
topic dispatchers freed when idle (timerwheel.security.limits, timerwheel.delivery.hub)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from helpers.calls import own_connection
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.security.limits import ByteBudget, PerKeyLimit
from timerwheel.wheels.domain import Overloaded


def wait_until(predicate, timeout_s: float = WAIT_S) -> bool:
    """Poll `predicate` (a state owned by another thread we cannot wait on) until true."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.02)
    return True


def test_a_byte_budget_refuses_what_would_go_over_and_frees_on_exit():
    budget = ByteBudget(100, "max_inflight_request_bytes")
    with budget.hold(60, "SendBatch"):
        refused = pytest.raises(Overloaded, match=r"SendBatch of 50 bytes: .* holds 60 bytes")
        with refused, budget.hold(50, "SendBatch"):
            pass
        with budget.hold(40, "Send"):
            assert budget.held == 100
    assert budget.held == 0
    with budget.hold(500, "SendBatch"):  # alone, even a call above the budget is served
        assert budget.held == 500


def test_a_per_key_limit_counts_each_key_apart():
    limit = PerKeyLimit(2, "max_subscribers_per_peer")
    limit.acquire("a", "Subscribe")
    limit.acquire("a", "Subscribe")
    with pytest.raises(Overloaded, match=r"Subscribe: a already holds 2 .*=2"):
        limit.acquire("a", "Subscribe")
    limit.acquire("b", "Subscribe")
    limit.release("a")
    limit.acquire("a", "Subscribe")
    assert limit.count("a") == 2 and limit.count("b") == 1


def test_one_connection_cannot_take_every_subscribe_stream(make_server):
    server = make_server(max_subscribers_per_peer=2, max_subscribers=8)
    greedy = TimerClient(server.target, timeout_s=WAIT_S)
    polite = own_connection(server.target)
    streams = []
    try:
        streams = [Collector(greedy, f"idle{n}") for n in range(3)]
        assert wait_until(lambda: any(s.ended.is_set() for s in streams))
        refused = [s for s in streams if s.error is not None]
        assert len(refused) == 1
        assert refused[0].error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_subscribers_per_peer=2" in refused[0].error.details
        consumer = Collector(polite, "orders")  # another connection still gets a stream
        streams.append(consumer)
        polite.send("orders", b"x", delay_ms=0)
        assert consumer.wait_count(1)[0].body == b"x"
    finally:
        for stream in streams:
            stream.stop()
        greedy.close()
        polite.close()


def test_dispatchers_of_topics_nobody_uses_any_more_are_freed(server, client):
    baseline = server.hub.topic_count()
    streams = [Collector(client, f"once{n}") for n in range(20)]
    assert wait_until(lambda: server.hub.subscriber_count() == 20)
    assert server.hub.topic_count() == baseline + 20
    for stream in streams:
        stream.stop()
    assert wait_until(lambda: server.hub.topic_count() == baseline)
    again = Collector(client, "once3")  # a freed topic works as before
    try:
        client.send("once3", b"later", delay_ms=0)
        assert again.wait_count(1)[0].body == b"later"
    finally:
        again.stop()
