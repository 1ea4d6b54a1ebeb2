"""The clients send again what a server refused at the door while its fires ran late
(timerwheel/retries.py): over real gRPC, against a server whose admission gate is held
closed in virtual time (as in test_service_admission.py: timers fired 4 s late, then the
clock held so the gate's hold cannot pass until the test moves it).

Each kind of send (Client.send with a server-made id, Client.send_batch, the Producer,
AsyncClient.send, the AsyncProducer) is refused at least once, then succeeds once the
gate opens, stored exactly once; a call whose deadline comes first raises the refusal.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
import time

import grpc
import pytest
from helpers.waits import WAIT_S, until

import timerwheel
from timerwheel import retries
from timerwheel.client import Client
from timerwheel.types import RemoteError


def _refused_now(client: Client) -> bool:
    """Whether a raw Send (not retried) is refused by the gate now; nothing is stored."""
    try:
        client.service.Send(Client.request("probe", b"", delay_ms=60_000), timeout=WAIT_S)
    except grpc.RpcError as error:
        assert retries.retry_after_ms(error) is not None, error
        return True
    return False


class RefusedCalls:
    """Which calls (one `Retrying` each) the clients have seen refused so far."""

    def __init__(self, monkeypatch) -> None:
        self.calls: set[int] = set()
        self._lock = threading.Lock()
        original = retries.Retrying.after

        def after(retrying, error, now):
            if retries.retry_after_ms(error) is not None:
                with self._lock:
                    self.calls.add(id(retrying))
            return original(retrying, error, now)

        monkeypatch.setattr(retries.Retrying, "after", after)

    def __len__(self) -> int:
        with self._lock:
            return len(self.calls)


@pytest.fixture
def closed_gate(late_fires_server):
    """A server whose gate is closed, its clock held, and a client of it."""
    clock, server = late_fires_server
    with Client(server.target, timeout_s=WAIT_S) as client:
        client.send_batch([Client.request("due", b"", delay_ms=1_000) for _ in range(4)])
        clock.advance(5_000)  # the four fire 4 s late, one an iteration: the gate closes
        until(lambda: _refused_now(client), "the gate never closed")
        yield clock, server, client


def _pending(client: Client, topic: str) -> int:
    return client.count(topic).pending


def test_every_kind_of_send_refused_at_first_is_stored_once_the_gate_opens(
    closed_gate, monkeypatch
):
    clock, server, client = closed_gate
    refused = RefusedCalls(monkeypatch)
    batch = [Client.request("batch", b"", delay_ms=60_000, message_id=f"b{i}") for i in range(3)]

    async def async_sends():
        async with (
            timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as aclient,
            aclient.producer(linger_ms=0) as producer,
        ):
            return await asyncio.gather(
                aclient.send("async", b"", delay_ms=60_000),
                producer.send("async-producer", b"", delay_ms=60_000),
            )

    with (
        concurrent.futures.ThreadPoolExecutor(4) as pool,
        client.producer(linger_ms=0) as producer,
    ):
        single = pool.submit(client.send, "single", b"", delay_ms=60_000)  # server-made id
        batched = pool.submit(client.send_batch, batch)
        produced = producer.send("producer", b"", delay_ms=60_000)
        awaited = pool.submit(asyncio.run, async_sends())
        until(lambda: len(refused) >= 5, "not every send was refused")
        assert not any(f.done() for f in (single, batched, produced, awaited))

        clock.advance(100)  # past the hold, and nothing due: the next iteration reopens
        results = [single.result(WAIT_S), *batched.result(WAIT_S), produced.result(WAIT_S)]
        results += awaited.result(WAIT_S)

    assert [r.message_id for r in results[1:4]] == ["b0", "b1", "b2"]
    assert len({r.message_id for r in results}) == 7
    assert all(not r.existed for r in results)
    for topic, sent in [
        ("single", 1), ("batch", 3), ("producer", 1), ("async", 1), ("async-producer", 1),
    ]:  # fmt: skip
        assert _pending(client, topic) == sent, topic  # once: the refusals stored nothing


def test_a_gate_closed_past_the_deadline_raises_the_refusal(closed_gate, monkeypatch):
    _clock, server, _client = closed_gate
    refused = RefusedCalls(monkeypatch)
    with Client(server.target, timeout_s=1.0) as client:
        with pytest.raises(RemoteError) as raised:
            client.send("late", b"", delay_ms=60_000)
        error = raised.value
        assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "fire_lag_ms=4000" in error.details and "admit_fire_lag_ms=20" in error.details
        assert error.retry_after_ms == 20
        with client.producer(linger_ms=0) as producer, pytest.raises(RemoteError) as produced:
            producer.send("late", b"", delay_ms=60_000).result(WAIT_S)
        assert produced.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "fire_lag_ms=4000" in produced.value.details
    assert len(refused) == 2  # each was retried, not refused once and raised
    assert _pending(_client, "late") == 0


def test_other_backpressure_is_not_retried(virtual_server):
    """Only the gate's refusal promises nothing was stored: a send refused because the
    un-acked backlog is full (RESOURCE_EXHAUSTED too) is raised at once, unmarked."""
    clock, server = virtual_server(max_unacked=2, admit_fire_lag_ms=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        client.send_batch([Client.request("due", b"", delay_ms=1_000) for _ in range(2)])
        clock.advance(2_000)
        until(lambda: client.stats().unacked == 2, "the two never fired")
        started = time.monotonic()
        with pytest.raises(RemoteError) as raised:
            client.send("more", b"", delay_ms=60_000)
        assert time.monotonic() - started < WAIT_S / 2  # raised, not retried to the deadline
        assert raised.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "max_unacked=2" in raised.value.details
        assert raised.value.retry_after_ms is None
