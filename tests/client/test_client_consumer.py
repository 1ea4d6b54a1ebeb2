"""timerwheel.Client.consume over real gRPC: handlers get Message objects, a return acks,
a raise nacks (delivered again), explicit ack/nack, and `stop` ends it even when idle."""

from __future__ import annotations

import threading

import pytest
from helpers.waits import WAIT_S

import timerwheel
from timerwheel.client import TimerClient
from timerwheel.common import State


def _fire_now(client, topic: str, count: int) -> list[str]:
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=0) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


def _until(stop: threading.Event, predicate):
    """A handler wrapper that sets `stop` once `predicate()` holds after a call."""

    def wrap(handler):
        def run(message):
            try:
                return handler(message)
            finally:
                if predicate():
                    stop.set()

        return run

    return wrap


def test_each_message_is_handled_once_and_acked(client):
    sent = _fire_now(client, "work", 300)
    seen: list[timerwheel.Message] = []
    lock = threading.Lock()
    stop = threading.Event()

    @_until(stop, lambda: len(seen) >= len(sent))
    def handle(message):
        assert isinstance(message, timerwheel.Message) and message.topic == "work"
        with lock:
            seen.append(message)

    assert client.consume("work", handle, concurrency=4, max_in_flight=64, stop=stop) == 300
    assert sorted(m.message_id for m in seen) == sorted(sent)
    assert {m.attempt for m in seen} == {1}
    assert client.stats().unacked == 0  # every ack landed before consume returned
    assert {client.get(m).state for m in sent[:5]} == {State.ACKED}


def test_a_raising_handler_nacks_and_the_message_comes_again(make_server):
    server = make_server()  # ack timeout 30 s: a quick second attempt is the Nack RPC
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as client:
        [message_id] = _fire_now(client, "fragile", 1)
        attempts: list[int] = []
        stop = threading.Event()

        @_until(stop, lambda: len(attempts) >= 2)
        def handle(message):
            attempts.append(message.attempt)
            if message.attempt == 1:
                raise RuntimeError("handler bug")

        assert client.consume("fragile", handle, stop=stop) == 1
        assert attempts == [1, 2]
        assert client.get(message_id).state is State.ACKED


def test_explicit_ack_and_nack_win_over_the_handler_outcome(make_server):
    server = make_server()  # ack timeout 30 s: a quick second attempt is the Nack RPC
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as client:
        keep, give_back = _fire_now(client, "explicit", 2)
        calls: list[tuple[str, int]] = []
        stop = threading.Event()

        @_until(stop, lambda: len(calls) >= 3)
        def handle(message):
            calls.append((message.message_id, message.attempt))
            if message.message_id == keep:
                assert message.ack() and not message.ack()  # the first settlement wins
                raise RuntimeError("after the ack: must not nack")
            if message.attempt == 1:
                assert message.nack()  # returns normally, but nacked: comes again

        assert client.consume("explicit", handle, stop=stop) == 2
        assert sorted(calls) == sorted([(keep, 1), (give_back, 1), (give_back, 2)])
        assert client.get(keep).state is State.ACKED


def test_stop_ends_consume_on_an_idle_topic(client):
    stop = threading.Event()
    returned: list[int] = []
    thread = threading.Thread(
        target=lambda: returned.append(client.consume("idle", lambda m: None, stop=stop))
    )
    thread.start()
    try:
        assert not stop.wait(0.2)  # a moment on an idle stream
        stop.set()
        thread.join(WAIT_S)
        assert not thread.is_alive() and returned == [0]
    finally:
        stop.set()


def test_unhandled_messages_go_back_when_consume_stops(client):
    sent = _fire_now(client, "half", 20)
    stop = threading.Event()
    handled: list[str] = []

    @_until(stop, lambda: True)  # stop after the first message
    def handle(message):
        handled.append(message.message_id)

    assert client.consume("half", handle, max_in_flight=20, stop=stop) == len(handled)
    rest: list[str] = []
    again = threading.Event()

    @_until(again, lambda: len(rest) >= len(sent) - len(handled))
    def handle_rest(message):
        rest.append(message.message_id)

    client.consume("half", handle_rest, stop=again)
    assert sorted(handled + rest) == sorted(sent)


def test_concurrency_must_be_positive(client):
    with pytest.raises(ValueError, match="concurrency=0"):
        client.consume("t", lambda m: None, concurrency=0)


def test_a_message_that_always_fails_goes_to_its_dead_letter_topic(client):
    request = TimerClient.request("doomed", b"x", delay_ms=0, max_attempts=2)
    client.send_batch([request])
    attempts: list[int] = []
    stop = threading.Event()

    @_until(stop, lambda: len(attempts) >= 2)
    def handle(message):
        attempts.append(message.attempt)
        raise ValueError("cannot parse")

    assert client.consume("doomed", handle, stop=stop) == 0
    assert attempts == [1, 2]
    dead: list[timerwheel.Message] = []
    done = threading.Event()
    client.consume("doomed.dlq", _until(done, lambda: bool(dead))(dead.append), stop=done)
    assert [m.body for m in dead] == [b"x"]
    assert "ValueError: cannot parse" in str(dead[0].delivery)  # the handler's error, kept
