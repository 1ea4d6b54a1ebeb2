"""Nack over real gRPC: a failed attempt, redelivered at once or after the client's backoff."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.time_of_day import wall_ms
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient

pytestmark = pytest.mark.wallclock


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
        (lambda: client.send("jobs", b"", delay_ms=1, max_attempts=-1), "max_attempts=-1"),
        (lambda: client.send("jobs", b"", delay_ms=1, max_attempts=1001), "max_attempts=1001"),
        (lambda: client.send("jobs", b"", delay_ms=1, dead_letter_topic="a b"),
         "dead_letter_topic='a b'"),
        (lambda: client.send("jobs", b"", delay_ms=1, dead_letter_topic="jobs"),
         "dead_letter_topic='jobs'"),
    ]  # fmt: skip
    for call, fragment in cases:
        error = status_of(call)
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert fragment in error.details, error.details
    assert client.list("jobs") == ([], "")  # nothing stored


def test_nack_refuses_more_ids_than_max_ack_ids_naming_the_count(make_server):
    """A Nack's ids are capped like an Ack's: one over is refused before any is looked at
    (a Nack of a million ids, a few at once, once took the server's memory)."""
    server = make_server(max_ack_ids=50)
    with _client(server) as client:
        message_id = client.send("capped", b"x", delay_ms=0).message_id
        error = status_of(lambda: client.nack("capped", [message_id] + ["n"] * 50))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "message_ids='<51 ids>'" in error.details, error.details
        assert "at most 50 per Nack" in error.details, error.details
        assert client.nack("capped", ["n"] * 50).nacked == 0  # the cap itself is taken


def test_nacks_up_to_max_attempts_move_the_message_to_its_dead_letter_topic(
    make_server, collectors
):
    server = make_server()
    with _client(server) as client:
        jobs = Collector(client, "jobs", auto_ack=False)
        collectors.append(jobs)
        message_id = client.send(
            "jobs", b"poison", delay_ms=0, properties={"k": "v"}, max_attempts=2
        ).message_id
        jobs.wait_count(1)
        assert client.nack("jobs", [message_id], reason="bad json").dead_lettered == 0
        assert jobs.wait_count(2)[1].attempt == 2
        response = client.nack("jobs", [message_id], reason="still bad")
        assert (response.nacked, response.dead_lettered) == (1, 1)

        dead = Collector(client, "jobs.dlq", auto_ack=False)
        collectors.append(dead)
        [letter] = dead.wait_count(1)
        assert (letter.message_id, letter.body, letter.topic) == (message_id, b"poison", "jobs.dlq")
        assert dict(letter.properties) == {
            "k": "v",
            "timerwheel.dead_letter.topic": "jobs",
            "timerwheel.dead_letter.attempts": "2",
            "timerwheel.dead_letter.reason": "still bad",
            "timerwheel.dead_letter.at_ms": str(letter.fired_at_ms),
        }
        stored = client.get(message_id)
        assert (stored.topic, stored.state) == ("jobs.dlq", 2)  # FIRED on the DLQ
        assert client.ack("jobs", [message_id]) == 0  # no longer on its old topic
        assert client.ack("jobs.dlq", [message_id]) == 1
        assert client.stats().unacked == 0
        assert not jobs.wait_for(lambda c: len(c.deliveries) > 2, timeout_s=0.5)
        assert len(dead.deliveries) == 1


def test_ack_timeouts_count_and_the_server_default_and_a_named_dlq_apply(make_server, collectors):
    server = make_server(ack_timeout_ms=300, max_attempts=2)
    with _client(server) as client:
        slow = Collector(client, "slow", auto_ack=False)
        collectors.append(slow)
        by_default = client.send("slow", b"a", delay_ms=0).message_id
        named = client.send("slow", b"b", delay_ms=0, dead_letter_topic="parked").message_id
        unlimited = client.send("slow", b"c", delay_ms=0, max_attempts=0).message_id
        parked = Collector(client, "parked")
        dlq = Collector(client, "slow.dlq")
        collectors.extend([parked, dlq])
        assert parked.wait_count(1)[0].message_id == named
        assert dlq.wait_count(1)[0].message_id == by_default
        assert dlq.deliveries[0][0].properties["timerwheel.dead_letter.reason"] == "ack timeout"
        # max_attempts=0 overrides the server's 2: it keeps coming back.
        assert slow.wait_for(lambda c: c.ids().count(unlimited) >= 3)
        assert slow.ids().count(by_default) == slow.ids().count(named) == 2
