"""Calls to a server: a client on a connection of its own, and the error a call raises."""

from __future__ import annotations

from collections.abc import Callable

import grpc

from helpers.waits import WAIT_S
from timerwheel.client import RemoteError, TimerClient
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc


def own_connection(target: str) -> TimerClient:
    """A client on a connection of its own: channels of one process to one target share a
    connection unless told to use a local subchannel pool."""
    client = TimerClient(target, timeout_s=WAIT_S)
    client.close()
    client.channel = grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])
    client.channels = [client.channel]  # what close() closes
    client.service = pb_grpc.TimerServiceStub(client.channel)
    return client


def status_of(call: Callable[[], object]) -> RemoteError:
    """The RemoteError `call()` raises (fails the test when it succeeds)."""
    try:
        result = call()
    except RemoteError as exc:
        return exc
    raise AssertionError(f"expected an error, got {result!r}")
