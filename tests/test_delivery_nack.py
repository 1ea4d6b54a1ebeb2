"""Nack over real gRPC: a failed attempt, redelivered at once or after the client's backoff."""

from __future__ import annotations

import grpc
from conftest import WAIT_S, Collector, status_of, wall_ms

from timerwheel.client import TimerClient


def _client(server) -> TimerClient:
    return TimerClient(server.target, timeout_s=WAIT_S)


def test_nack_redelivers_at_once_with_the_attempt_increased(make_server, collectors):
    server = make_server()  # the ack timeout is 30 s: a redelivery here is the nack's
    with _client(server) as client:
        collector = Collector(client, "jobs", auto_ack=False)
        collectors.append(collector)
        message_id = client.send("jobs", b"work", delay_ms=0).message_id
        [first] = collector.wait_count(1)
        assert first.attempt == 1

        nacked_at = wall_ms()
        assert client.nack("jobs", [message_id], reason="db down").nacked == 1
        second = collector.wait_count(2)[1]
        assert (second.message_id, second.attempt) == (message_id, 2)
        assert collector.deliveries[1][1] - nacked_at < 5_000  # not the 30 s ack timeout

        assert client.nack("jobs", ["never-sent"]).nacked == 0  # not in flight: skipped
        assert client.ack("jobs", [message_id]) == 1
        assert client.nack("jobs", [message_id]).nacked == 0  # acked: nothing to give back


def test_nack_with_backoff_redelivers_not_before_it(make_server, collectors):
    server = make_server()
    with _client(server) as client:
        collector = Collector(client, "later", auto_ack=False)
        collectors.append(collector)
        message_id = client.send("later", b"x", delay_ms=0).message_id
        collector.wait_count(1)

        nacked_at = wall_ms()
        response = client.nack("later", [message_id], redeliver_after_ms=1_500)
        assert response.nacked == 1
        assert not collector.wait_for(lambda c: len(c.deliveries) > 1, timeout_s=1.0)
        again = collector.wait_count(2)[1]
        assert again.attempt == 2
        assert collector.deliveries[1][1] - nacked_at >= 1_500
        assert client.ack("later", [message_id]) == 1


def test_nack_refuses_bad_input_naming_the_field(client):
    cases = [
        (lambda: client.nack("jobs", ["x"], redeliver_after_ms=-1), "redeliver_after_ms=-1"),
        (lambda: client.nack("", ["x"]), "topic=''"),
        (lambda: client.nack("jobs", ["ok", "bad id"]), "message_ids[1]='bad id'"),
        (lambda: client.nack("jobs", ["x"], reason="r" * 1025), "1025 characters"),
    ]
    for call, fragment in cases:
        error = status_of(call)
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in error.details, error.details
