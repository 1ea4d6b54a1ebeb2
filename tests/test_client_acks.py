"""timerwheel.acks: settlements gather while one call is on the wire and for the linger,
go as one call each (nacks one per reason), and close() sends what waits at once.

The client here is a recorder standing in for the network, so the batching policy is
seen call by call; tests/test_client_consumer.py runs the same sender over real gRPC.
"""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from timerwheel.acks import AckSender, check_linger_ms
from timerwheel.types import RemoteError

LONG_LINGER_MS = 60_000  # longer than any test waits: only close() can end it


class RecordingClient:
    """Records Ack and Nack calls; an Ack can be held on the wire until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, tuple[str, ...], str]] = []
        self.on_wire = threading.Event()
        self.release = threading.Event()
        self.release.set()
        self.fail_acks = False

    def ack(self, topic: str, message_ids: list[str]) -> int:
        self.calls.append(("ack", topic, tuple(message_ids), ""))
        self.on_wire.set()
        self.release.wait()
        if self.fail_acks:
            raise RemoteError(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        return len(message_ids)

    def nack(self, topic: str, message_ids: list[str], reason: str = "") -> tuple[int, int]:
        self.calls.append(("nack", topic, tuple(message_ids), reason))
        return len(message_ids), 0


def test_settlements_within_the_linger_go_in_one_call_and_close_sends_them_at_once():
    client = RecordingClient()
    sender = AckSender(client, "orders", linger_ms=LONG_LINGER_MS)
    sender.ack(["a", "b"])
    sender.ack(["c"])
    sender.nack(["d"], "bad input")
    sender.nack(["e"], "timeout")
    sender.nack(["f"], "bad input")
    assert client.calls == []  # still gathering
    started = time.monotonic()
    sender.close()
    assert time.monotonic() - started < 5  # not the 60 s linger
    assert client.calls == [
        ("ack", "orders", ("a", "b", "c"), ""),
        ("nack", "orders", ("d", "f"), "bad input"),
        ("nack", "orders", ("e",), "timeout"),
    ]
    assert sender.acked == 3 and sender.error is None


def test_one_call_on_the_wire_at_a_time_and_what_comes_meanwhile_goes_next():
    client = RecordingClient()
    client.release.clear()
    sender = AckSender(client, "orders", linger_ms=0)
    sender.ack(["1"])
    assert client.on_wire.wait(5)  # the first Ack is held on the wire
    sender.ack(["2", "3"])
    sender.ack(["4"])
    assert client.calls == [("ack", "orders", ("1",), "")]
    client.release.set()
    sender.close()
    assert client.calls == [("ack", "orders", ("1",), ""), ("ack", "orders", ("2", "3", "4"), "")]
    assert sender.acked == 4


def test_more_ids_than_one_call_takes_go_in_several_calls():
    client = RecordingClient()
    sender = AckSender(client, "orders", linger_ms=LONG_LINGER_MS, max_ids=2)
    sender.ack(["1", "2", "3", "4", "5"])
    sender.close()
    assert [call[2] for call in client.calls] == [("1", "2"), ("3", "4"), ("5",)]
    assert sender.acked == 5


def test_a_failed_call_is_kept_and_the_sender_goes_on():
    client = RecordingClient()
    client.fail_acks = True
    sender = AckSender(client, "orders", linger_ms=0)
    sender.ack(["1"])
    sender.close()
    assert isinstance(sender.error, RemoteError)
    assert sender.error.code is grpc.StatusCode.UNAVAILABLE
    assert sender.acked == 0


def test_close_with_nothing_waiting_returns_and_makes_no_call():
    client = RecordingClient()
    with AckSender(client, "orders", linger_ms=LONG_LINGER_MS):
        pass
    assert client.calls == []


@pytest.mark.parametrize("bad", [-1, 2.5, "10ms", True])
def test_a_bad_linger_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=f"ack_linger_ms={bad!r}"):
        check_linger_ms(bad)
    with pytest.raises(ValueError, match="ack_linger_ms"):
        AckSender(RecordingClient(), "orders", linger_ms=bad)


@pytest.mark.parametrize("bad", [0, -3, 1.5])
def test_a_bad_call_size_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=f"max_ids={bad!r}"):
        AckSender(RecordingClient(), "orders", max_ids=bad)
