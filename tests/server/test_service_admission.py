"""Send admission over real gRPC: sends refused while the firing loop runs late, and
only sends (timerwheel.wheels.admission).

The lag is made in virtual time, not by loading the machine: timers due a second from
now, then the server's clock moved 5 s on, fire 4 s late. With one fire a chunk the
writer fires them over several iterations in a row, each late: the gate closes. The
clock then stays put, so the gate's hold cannot pass until the test moves it again.
"""

from __future__ import annotations

import grpc
import pytest
from helpers.waits import WAIT_S, until

from timerwheel.client import TimerClient
from timerwheel.common import State
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb


def _refusal(client: TimerClient) -> RemoteError | None:
    """One Send on the raw stub (the client would retry a refusal: see
    test_service_admission_retry.py), refused or stored."""
    try:
        client.service.Send(TimerClient.request("more", b"", delay_ms=60_000), timeout=WAIT_S)
    except grpc.RpcError as exc:
        return RemoteError.of(exc)
    return None


@pytest.fixture
def late_server(late_fires_server):
    clock, server = late_fires_server
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        yield clock, client


def test_sends_are_refused_while_fires_run_late_and_acks_still_served(late_server):
    clock, client = late_server
    due = client.send_batch([TimerClient.request("t", b"", delay_ms=1_000) for _ in range(4)])
    later = client.send("t", b"", delay_ms=600_000)
    assert _refusal(client) is None  # on time: admitted

    clock.advance(5_000)  # the four fire 4 s late, one an iteration
    error = until(lambda: _refusal(client), "sends were never refused")
    assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "fire_lag_ms=4000" in error.details and "admit_fire_lag_ms=20" in error.details
    assert error.retry_after_ms == 20  # nothing stored: the gate's hold, then again
    batch = [TimerClient.request("more", b"", delay_ms=60_000)] * 3
    with pytest.raises(grpc.RpcError) as refused:
        client.service.SendBatch(pb.SendBatchRequest(messages=batch), timeout=WAIT_S)
    assert refused.value.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "firing loop is running behind" in refused.value.details()

    # What relieves the load is served meanwhile: acks, cancels, reads.
    until(lambda: client.stats().unacked == 4, "the four never fired")
    assert client.ack("t", [r.message_id for r in due]) == 4
    assert client.cancel(later.message_id) is State.CANCELLED
    assert client.get(due[0].message_id).state is State.ACKED
    assert _refusal(client) is not None  # the clock has not moved: still within the hold

    clock.advance(100)  # past the hold, and nothing due: the next iteration reopens
    until(lambda: _refusal(client) is None, "sends were never admitted again")
    assert len(client.send_batch(batch)) == 3


def test_zero_never_refuses(virtual_server):
    clock, server = virtual_server(fire_chunk=1, admit_fire_lag_ms=0)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        client.send_batch([TimerClient.request("t", b"", delay_ms=1_000) for _ in range(4)])
        clock.advance(5_000)
        until(lambda: client.stats().unacked == 4, "the four never fired")
        assert _refusal(client) is None
