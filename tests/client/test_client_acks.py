"""timerwheel.acks: settlements gather for the linger and while the gate is shut (the
newest call neither answered nor out a whole linger), go as one call each (nacks one per
reason), up to `max_calls` batches on the wire, and close() sends what waits at once.

The gate's rule is checked as a pure function. The sender's client here is a recorder
standing in for the network, so the batching policy is seen call by call;
tests/client/test_client_consumer.py runs the same sender over real gRPC.
"""

from __future__ import annotations

import asyncio
import threading
import time

import grpc
import pytest
from helpers.waits import WAIT_S

from timerwheel.acks import AckSender, check_linger_ms, gate_wait_s
from timerwheel.aio_consume import consume_async
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb

LONG_LINGER_MS = 60_000  # longer than any test waits: only close() can end it


class RecordingClient:
    """Records Ack and Nack calls; Acks can be held on the wire until released."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, tuple[str, ...], str]] = []
        self.release = threading.Event()
        self.release.set()
        self.fail_acks = False
        self._held = threading.Condition()
        self.acks_on_wire = 0

    def ack(self, topic: str, message_ids: list[str]) -> int:
        with self._held:
            self.calls.append(("ack", topic, tuple(message_ids), ""))
            self.acks_on_wire += 1
            self._held.notify_all()
        self.release.wait()
        with self._held:
            self.acks_on_wire -= 1
        if self.fail_acks:
            raise RemoteError(grpc.StatusCode.UNAVAILABLE, "the server is shutting down")
        return len(message_ids)

    def nack(self, topic: str, message_ids: list[str], reason: str = "") -> tuple[int, int]:
        self.calls.append(("nack", topic, tuple(message_ids), reason))
        return len(message_ids), 0

    def wait_on_wire(self, acks: int) -> bool:
        """Until this many Acks have been made and are held (False after 5 s)."""
        with self._held:
            return self._held.wait_for(lambda: self.acks_on_wire >= acks, timeout=5)


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


def test_each_answered_batch_is_reported_with_its_round_trip_and_ids():
    client = RecordingClient()
    client.release.clear()
    answers: list[tuple[int, int]] = []
    sender = AckSender(
        client,
        "orders",
        linger_ms=0,
        max_ids=2,
        on_answer=lambda ms, ids: answers.append((ms, ids)),
    )
    sender.ack(["1", "2", "3"])
    assert client.wait_on_wire(1)
    time.sleep(0.05)  # the answer is held this long: the round trip must show it
    client.release.set()
    sender.nack(["4"], "bad")
    sender.close()
    reports = dict((ids, ms) for ms, ids in answers)
    assert sorted(reports) == [1, 3]  # one report a batch (its calls together), any order
    assert reports[3] >= 50


@pytest.mark.parametrize(
    ("calls_on_wire", "newest_out_s", "expected"),
    [
        (0, None, 0.0),  # nothing on the wire: gather now
        (1, None, 0.0),  # the newest returned (an older one is still out): gather now
        (1, 0.004, 0.006),  # the newest went 4 ms ago: 6 ms more of the 10 ms linger
        (3, 0.010, 0.0),  # out a whole linger: the next may go beside it
        (3, 0.250, 0.0),
        (4, 0.250, None),  # max_calls out: wait for one to return
        (4, None, None),
    ],
)
def test_the_gate_opens_when_the_newest_call_returns_or_has_been_out_a_linger(
    calls_on_wire, newest_out_s, expected
):
    wait_s = gate_wait_s(calls_on_wire, newest_out_s, linger_s=0.010, max_calls=4)
    assert wait_s == (None if expected is None else pytest.approx(expected))


def test_at_most_max_calls_on_the_wire_and_what_comes_meanwhile_goes_next():
    client = RecordingClient()
    client.release.clear()
    sender = AckSender(client, "orders", linger_ms=0, max_calls=1)
    sender.ack(["1"])
    assert client.wait_on_wire(1)  # the first Ack is held on the wire
    sender.ack(["2", "3"])
    sender.ack(["4"])
    assert client.calls == [("ack", "orders", ("1",), "")]
    client.release.set()
    sender.close()
    assert client.calls == [("ack", "orders", ("1",), ""), ("ack", "orders", ("2", "3", "4"), "")]
    assert sender.acked == 4


def test_a_call_out_a_whole_linger_no_longer_holds_the_next_batch_back():
    client = RecordingClient()
    client.release.clear()  # no Ack is answered until the end
    sender = AckSender(client, "orders", linger_ms=20, max_calls=2)
    sender.ack(["1"])
    assert client.wait_on_wire(1)
    sender.ack(["2"])
    assert client.wait_on_wire(2)  # beside the first, still unanswered
    sender.ack(["3"])  # two out: waits for an answer
    assert client.calls == [("ack", "orders", ("1",), ""), ("ack", "orders", ("2",), "")]
    client.release.set()
    sender.close()
    assert [call[2] for call in client.calls] == [("1",), ("2",), ("3",)]
    assert sender.acked == 3


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


class HeldAsyncClient:
    """The few calls `consume_async` makes: a Subscribe fed by the test, Acks held
    until `release` is set."""

    def __init__(self) -> None:
        self.batches: asyncio.Queue[list[pb.Delivery] | None] = asyncio.Queue()
        self.release = asyncio.Event()
        self.acks: list[tuple[str, ...]] = []
        self.acks_on_wire = 0
        self.changed = asyncio.Event()

    def subscribe(self, topic: str, max_in_flight: int) -> HeldAsyncClient:
        return self

    def __aiter__(self) -> HeldAsyncClient:
        return self

    async def __anext__(self) -> list[pb.Delivery]:
        batch = await self.batches.get()
        if batch is None:
            raise StopAsyncIteration
        return batch

    def cancel(self) -> None:
        self.batches.put_nowait(None)

    async def ack(self, topic: str, message_ids: list[str]) -> int:
        self.acks.append(tuple(message_ids))
        self.acks_on_wire += 1
        self.changed.set()
        await self.release.wait()
        self.acks_on_wire -= 1
        return len(message_ids)

    async def wait_on_wire(self, acks: int) -> None:
        while self.acks_on_wire < acks:
            self.changed.clear()
            await asyncio.wait_for(self.changed.wait(), WAIT_S)


def test_the_asyncio_consumer_sends_beside_an_unanswered_call_once_it_is_out_a_linger():
    async def main() -> None:
        client = HeldAsyncClient()
        stop = asyncio.Event()
        consumer = asyncio.create_task(
            consume_async(client, "orders", lambda message: None, stop=stop, ack_linger_ms=20)
        )
        client.batches.put_nowait([pb.Delivery(message_id="1")])
        await client.wait_on_wire(1)
        client.batches.put_nowait([pb.Delivery(message_id="2")])
        await client.wait_on_wire(2)  # beside the first, still unanswered
        assert client.acks == [("1",), ("2",)]
        client.release.set()
        stop.set()
        assert await asyncio.wait_for(consumer, WAIT_S) == 2

    asyncio.run(main())


@pytest.mark.parametrize("bad", [-1, 2.5, "10ms", True])
def test_a_bad_linger_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match=f"ack_linger_ms={bad!r}"):
        check_linger_ms(bad)
    with pytest.raises(ValueError, match="ack_linger_ms"):
        AckSender(RecordingClient(), "orders", linger_ms=bad)


@pytest.mark.parametrize("name", ["max_ids", "max_calls"])
@pytest.mark.parametrize("bad", [0, -3, 1.5])
def test_a_bad_call_size_or_count_is_refused_naming_it(name, bad):
    with pytest.raises(ValueError, match=f"{name}={bad!r}"):
        AckSender(RecordingClient(), "orders", **{name: bad})
