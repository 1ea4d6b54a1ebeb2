"""timerwheel.client.TimerClient against a live server: the consume loop, futures, errors."""

from __future__ import annotations

import threading

import grpc
import pytest
from conftest import WAIT_S, status_of

from timerwheel.client import RemoteError, TimerClient
from wheels.domain import State, TimerwheelError

pytestmark = pytest.mark.wallclock


def _fire_now(client: TimerClient, topic: str, count: int) -> list[str]:
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=0) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


def test_consume_handles_and_acks_every_batch(client):
    sent = _fire_now(client, "work", 300)
    seen: list[str] = []
    stop = threading.Event()

    def handle(batch):
        seen.extend(d.message_id for d in batch)
        if len(seen) >= len(sent):
            stop.set()

    assert client.consume("work", handle, max_in_flight=64, stop=stop) == 300
    assert seen == sent
    assert client.stats().unacked == 0  # every ack landed before consume returned
    assert {client.get(m).state for m in sent[:5]} == {State.ACKED}


def test_consume_leaves_a_failed_batch_unacked_for_redelivery(client):
    [message_id] = _fire_now(client, "fragile", 1)

    def fail(batch):
        raise RuntimeError("handler bug")

    with pytest.raises(RuntimeError, match="handler bug"):
        client.consume("fragile", fail)
    again: list = []
    stop = threading.Event()
    client.consume("fragile", lambda batch: (again.extend(batch), stop.set()), stop=stop)
    assert [(d.message_id, d.attempt) for d in again] == [(message_id, 2)]


def test_send_batch_future_and_raw_stubs(client):
    future = client.send_batch_future([TimerClient.request("f", b"x", delay_ms=60_000)] * 3)
    response = future.result(timeout=WAIT_S)
    assert len(response.results) == 3
    assert client.service is not None and client.admin is not None
    assert client.get(response.results[0].message_id).state == State.SCHEDULED


def test_errors_are_remote_errors_with_the_status_code(client):
    error = status_of(lambda: client.get("unknown-id"))
    assert isinstance(error, TimerwheelError) and error.code == grpc.StatusCode.NOT_FOUND
    assert str(error).startswith("NOT_FOUND: ")
    with pytest.raises(ValueError, match="give one of"):
        TimerClient.request("t", delay_ms=1, delay_level=1)


def test_unreachable_server_is_unavailable():
    with TimerClient("127.0.0.1:1", timeout_s=5) as client:
        with pytest.raises(RemoteError) as info:
            client.stats()
        assert info.value.code == grpc.StatusCode.UNAVAILABLE
