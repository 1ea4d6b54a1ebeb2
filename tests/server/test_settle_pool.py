"""timerwheel.server.settle_pool: Ack and Nack run on threads of their own, so a consumer's acks are
answered, and its window opens again, while every unary thread is held by sends. A real
server over real gRPC on loopback; only the Send handler of topic "held" is made to wait
(on an event the test sets) so that the unary pool is full for as long as the test says."""

from __future__ import annotations

import threading

import pytest
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.server.service import TimerService
from timerwheel.v1 import timerwheel_pb2 as pb


class HeldSends:
    def __init__(self) -> None:
        self.entered = threading.Semaphore(0)  # released once per held send that began
        self.release = threading.Event()


@pytest.fixture
def held_sends(monkeypatch) -> HeldSends:
    """Sends to topic "held" wait until `release` is set (then run as usual)."""
    held = HeldSends()
    send = TimerService.Send

    def held_send(self, request, context):
        if request.topic == "held":
            held.entered.release()
            held.release.wait(WAIT_S)
        return send(self, request, context)

    monkeypatch.setattr(TimerService, "Send", held_send)
    yield held
    held.release.set()  # never leave a handler thread waiting


def test_an_ack_frees_the_window_while_sends_hold_every_unary_thread(make_server, held_sends):
    server = make_server(grpc_workers=1, settle_workers=2)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        first, second = (client.send("jobs", f"m{i}", delay_ms=0).message_id for i in range(2))
        stream = client.service.Subscribe(pb.SubscribeRequest(topic="jobs", max_in_flight=1))
        try:
            batch = next(stream)
            assert [d.message_id for d in batch.deliveries] == [first]  # the window is full
            held = [
                client.service.Send.future(pb.SendRequest(topic="held", delay_ms=60_000))
                for _ in range(2)
            ]  # one on the only unary thread, one queued behind it
            assert held_sends.entered.acquire(timeout=WAIT_S)  # the thread is taken
            assert client.ack("jobs", [first]) == 1
            batch = next(stream)  # the ack gave the room back: the second comes
            assert [d.message_id for d in batch.deliveries] == [second]
            assert not any(future.done() for future in held)  # the sends were held throughout
            held_sends.release.set()
            assert all(future.result(WAIT_S).message_id for future in held)
        finally:
            stream.cancel()
