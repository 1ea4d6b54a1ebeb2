"""timerwheel.client.TimerClient against a live server: futures, errors, durations, targets.

The consume loop: test_client_consumer.py; the producer: test_client_producer.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import grpc
import pytest
from helpers.calls import status_of
from helpers.time_of_day import wall_ms
from helpers.waits import WAIT_S

from timerwheel.client import RemoteError, TimerClient
from timerwheel.common import State, TimerwheelError
from timerwheel.types import with_default_port
from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.wallclock


def _fire_now(client: TimerClient, topic: str, count: int) -> list[str]:
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=0) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


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


def test_get_state_is_a_name_that_still_equals_the_proto_int(client):
    sent = client.send("named", b"x", delay_ms="1h")
    info = client.get(sent.message_id)
    assert info.state is State.SCHEDULED and info.state.name == "SCHEDULED"
    assert info.state == pb.SCHEDULED and info.proto.state == pb.SCHEDULED
    assert "state=SCHEDULED" in repr(info)
    [listed], _ = client.list("named")
    assert listed.state is State.SCHEDULED and listed.message_id == sent.message_id


def test_delays_take_durations_like_the_cli(client):
    before = wall_ms()
    for delay in ("2s", 2_000, timedelta(seconds=2)):
        sent = client.send("durations", b"x", delay_ms=delay)
        assert before + 2_000 <= sent.deliver_at_ms <= wall_ms() + 2_000
    at = datetime.now(UTC) + timedelta(hours=1)
    assert client.send("durations", deliver_at_ms=at).deliver_at_ms == round(at.timestamp() * 1000)
    with pytest.raises(ValueError, match="delay_ms='2 fortnights'"):
        client.send("durations", delay_ms="2 fortnights")
    with pytest.raises(ValueError, match="aware datetime"):
        client.send("durations", deliver_at_ms=datetime(2030, 1, 1))


@pytest.mark.parametrize(
    ("given", "dialled"),
    [
        ("localhost", "localhost:7070"),
        ("localhost:9", "localhost:9"),
        ("10.0.0.1", "10.0.0.1:7070"),
        ("::1", "[::1]:7070"),
        ("[::1]", "[::1]:7070"),
        ("[::1]:9", "[::1]:9"),
        ("unix:/tmp/tw.sock", "unix:/tmp/tw.sock"),
        ("dns:///tw.example:9", "dns:///tw.example:9"),
    ],
)
def test_a_target_without_a_port_gets_7070(given, dialled):
    assert with_default_port(given) == dialled
