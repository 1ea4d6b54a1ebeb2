"""Message traces over real gRPC: `Get(include_trace)`, the subscriber's name, the CLI's
`get ID --trace`, first deliveries left out with `trace_first_deliveries` off, and a bad
consumer name refused."""

from __future__ import annotations

import json

import grpc
import pytest
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.cli.main import main
from timerwheel.client import TimerClient
from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.wallclock


def kinds(message) -> list[str]:
    return [pb.TraceKind.Name(e.kind) for e in message.trace]


def test_get_with_trace_shows_deliveries_to_the_named_consumer_then_the_ack(
    server, collectors, capsys
):
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        sent = client.send("jobs", b"work", delay_ms=0)
        subscription = client.subscribe("jobs", consumer="billing-worker-7")
        first = next(iter(subscription))[0]
        assert client.nack("jobs", [sent.message_id], reason="db down").nacked == 1
        second = next(iter(subscription))[0]
        assert (first.attempt, second.attempt) == (1, 2)
        assert client.ack("jobs", [sent.message_id]) == 1
        subscription.cancel()

        timer = client.get(sent.message_id, include_trace=True)
        assert kinds(timer) == [
            "TRACE_SENT", "TRACE_FIRED", "TRACE_DELIVERED", "TRACE_NACKED", "TRACE_DELIVERED",
            "TRACE_ACKED",
        ]  # fmt: skip
        delivered = [e for e in timer.trace if e.kind == pb.TRACE_DELIVERED]
        assert [(e.attempt, e.subscriber) for e in delivered] == [
            (1, "billing-worker-7"), (2, "billing-worker-7"),
        ]  # fmt: skip
        assert timer.trace[3].detail == "db down" and timer.attempts == 2
        times = [e.at_ms for e in timer.trace]
        assert times == sorted(times) and times[-1] == timer.acked_at_ms
        assert client.get(sent.message_id).trace == []  # only when asked for

        unnamed = client.send("jobs", b"x", delay_ms=0)
        collector = Collector(client, "jobs")
        collectors.append(collector)
        collector.wait_count(1)
        [event] = [
            e for e in client.get(unnamed.message_id, include_trace=True).trace
            if e.kind == pb.TRACE_DELIVERED
        ]  # fmt: skip
        assert event.subscriber.startswith("ipv4:127.0.0.1:")  # the peer, when unnamed

    capsys.readouterr()
    assert main(["get", sent.message_id, "--trace", "--target", server.target]) == 0
    out = capsys.readouterr().out
    assert "attempts      2" in out
    lines = out.split("trace\n", 1)[1].splitlines()
    assert [line.split()[1] for line in lines] == [
        "SENT", "FIRED", "DELIVERED", "NACKED", "DELIVERED", "ACKED",
    ]  # fmt: skip
    assert lines[2].endswith("attempt 1 to billing-worker-7")
    assert lines[3].endswith("attempt 1 failed: db down")
    assert main(["get", sent.message_id, "--trace", "--json", "--target", server.target]) == 0
    dumped = json.loads(capsys.readouterr().out)
    assert [e["kind"] for e in dumped["trace"]][-1] == "ACKED" and dumped["attempts"] == 2


def test_without_first_deliveries_only_the_retry_and_the_failure_are_traced(make_server):
    server = make_server(trace_first_deliveries=False)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        once = client.send("jobs", b"once", delay_ms=0)
        subscription = client.subscribe("jobs", consumer="billing-worker-7")
        stream = iter(subscription)
        assert [(d.message_id, d.attempt) for d in next(stream)] == [(once.message_id, 1)]
        assert client.ack("jobs", [once.message_id]) == 1
        retried = client.send("jobs", b"retried", delay_ms=0)
        assert next(stream)[0].message_id == retried.message_id
        assert client.nack("jobs", [retried.message_id], reason="db down").nacked == 1
        assert next(stream)[0].attempt == 2
        assert client.ack("jobs", [retried.message_id]) == 1
        subscription.cancel()

        assert kinds(client.get(once.message_id, include_trace=True)) == [
            "TRACE_SENT", "TRACE_FIRED", "TRACE_ACKED",
        ]  # fmt: skip
        timer = client.get(retried.message_id, include_trace=True)
        assert kinds(timer) == [
            "TRACE_SENT", "TRACE_FIRED", "TRACE_NACKED", "TRACE_DELIVERED", "TRACE_ACKED",
        ]  # fmt: skip
        assert (timer.trace[2].attempt, timer.trace[2].detail) == (1, "db down")
        assert (timer.trace[3].attempt, timer.trace[3].subscriber) == (2, "billing-worker-7")
        assert timer.attempts == 2


def test_a_bad_consumer_name_is_refused_naming_it(client):
    for name, fragment in (("x" * 129, "129 characters"), ("tab\there", "printable")):
        subscription = client.subscribe("jobs", consumer=name)
        error = status_of(lambda s=subscription: next(iter(s)))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "consumer=" in error.details and fragment in error.details
