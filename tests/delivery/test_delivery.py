"""Delivery over real gRPC: redelivery (ack timeout, stream end, restart), shared topics,
max_in_flight, batching, the un-acked backlog limit and the subscriber limit."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient

pytestmark = pytest.mark.wallclock


def _client(server) -> TimerClient:
    return TimerClient(server.target, timeout_s=WAIT_S)


def _fire_now(client: TimerClient, topic: str, count: int) -> list[str]:
    """`count` messages due at once (fired by the send's own commit), in one batch."""
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=0) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


def test_unacked_delivery_returns_after_the_ack_timeout_with_attempt_increased(
    make_server, collectors
):
    server = make_server(ack_timeout_ms=1_000)
    with _client(server) as client:
        collector = Collector(client, "jobs", auto_ack=False)
        collectors.append(collector)
        [message_id] = _fire_now(client, "jobs", 1)

        first, second = collector.wait_count(2)
        (_, first_at), (_, second_at) = collector.deliveries[:2]
        assert first.message_id == second.message_id == message_id
        assert (first.attempt, second.attempt) == (1, 2)
        # Client-side arrival times: the first may lag its hand-out on a loaded machine.
        assert 700 <= second_at - first_at <= 1_000 + 2_000

        assert client.ack("jobs", [message_id]) == 1
        assert client.ack("jobs", [message_id]) == 0  # already acked: nothing to do
        # Acked: no third delivery, though one and a half ack timeouts pass.
        assert not collector.wait_for(lambda c: len(c.deliveries) > 2, timeout_s=1.5)


def test_stream_end_redelivers_at_once_to_another_subscriber(make_server, collectors):
    server = make_server()  # the ack timeout is 30 s: redelivery here is not a timeout
    with _client(server) as client:
        first = Collector(client, "jobs", auto_ack=False)
        collectors.append(first)
        sent = _fire_now(client, "jobs", 3)
        first.wait_count(3)
        second = Collector(client, "jobs")  # everything is in flight at `first`
        collectors.append(second)
        first.stop()

        redelivered = second.wait_count(3, timeout_s=WAIT_S)
        assert sorted(d.message_id for d in redelivered) == sorted(sent)
        assert {d.attempt for d in redelivered} == {2}
        assert client.stats().unacked == 0


def test_subscribers_share_a_topic_and_max_in_flight_is_honoured(make_server, collectors):
    server = make_server()
    with _client(server) as client:
        holder = Collector(client, "shared", max_in_flight=5, auto_ack=False)
        collectors.append(holder)
        sent = _fire_now(client, "shared", 200)
        holder.wait_count(5)
        worker = Collector(client, "shared", max_in_flight=50)
        collectors.append(worker)
        worker.wait_count(195)

        held, worked = set(holder.ids()), set(worker.ids())
        assert holder.batch_sizes == [5]  # at its limit: nothing more while it does not ack
        assert held.isdisjoint(worked) and held | worked == set(sent)
        assert len(worker.ids()) == 195  # each message once
        assert max(worker.batch_sizes) <= 50 and max(worker.batch_sizes) > 1


def test_ready_messages_are_batched(make_server, collectors):
    server = make_server(delivery_batch_max=300)
    with _client(server) as client:
        sent = _fire_now(client, "batched", 1_000)
        collector = Collector(client, "batched", max_in_flight=2_000)
        collectors.append(collector)
        collector.wait_count(1_000)
        assert collector.batch_sizes[0] == 300
        assert max(collector.batch_sizes) == 300 and len(collector.batch_sizes) <= 10
        assert collector.ids() == sent  # fire order


def test_unacked_backlog_limit_refuses_sends_until_consumers_ack(make_server, collectors):
    server = make_server(max_unacked=10)
    with _client(server) as client:
        _fire_now(client, "busy", 10)
        assert client.stats().unacked == 10
        error = status_of(lambda: client.send("other", b"x", delay_ms=60_000))
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "unacked=10" in error.details and "max_unacked=10" in error.details
        batch = [TimerClient.request("other", b"x", delay_ms=1)]
        assert (
            status_of(lambda: client.send_batch(batch)).code == grpc.StatusCode.RESOURCE_EXHAUSTED
        )
        assert list(client.list_all("other")) == []  # nothing was stored

        collector = Collector(client, "busy")  # acks each batch before recording it
        collectors.append(collector)
        collector.wait_count(10)
        assert client.stats().unacked == 0
        assert client.send("other", b"x", delay_ms=60_000).message_id


def test_fired_unacked_messages_are_delivered_again_after_a_restart(make_server, collectors):
    first_server = make_server()
    with _client(first_server) as client:
        collector = Collector(client, "durable", auto_ack=False)
        sent = _fire_now(client, "durable", 5)
        collector.wait_count(5)
        acked = sent[0]
        assert client.ack("durable", [acked]) == 1
        collector.stop()
    first_server.stop()

    second_server = make_server()  # same data dir
    with _client(second_server) as client:
        assert client.stats().unacked == 4
        again = Collector(client, "durable")
        collectors.append(again)
        again.wait_count(4)
        assert again.ids() == sent[1:]
        assert not again.wait_for(lambda c: acked in c.ids(), timeout_s=0.5)


def test_subscriber_limit_is_resource_exhausted(make_server, collectors):
    server = make_server(max_subscribers=1)
    with _client(server) as client:
        first = Collector(client, "one")
        collectors.append(first)
        _fire_now(client, "one", 1)
        first.wait_count(1)  # its stream is registered and serving
        error = status_of(lambda: next(iter(client.subscribe("two"))))
        assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "subscribers=1" in error.details
