"""Issue 78: a clean consumer stop must not use up attempts of messages no handler saw.

Over real gRPC on loopback, with `max_attempts=1`: one failed attempt would send a message
to its dead-letter topic. A consumer that stops with messages prefetched releases them
(a Nack with `release`): they go at once to the topic's other consumers as the same
attempt, so across a rolling stop every message is handled exactly once, as attempt 1,
and nothing reaches `<topic>.dlq`."""

from __future__ import annotations

import asyncio
import threading
import time

from helpers.waits import WAIT_S

import timerwheel
from timerwheel.client import TimerClient
from timerwheel.common import State

PREFETCH = 20  # each consumer's max_in_flight: far more than a slow handler gets through


def _fire_now(client, topic: str, count: int) -> list[str]:
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=0) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


def _nothing_dead_lettered(client, topic: str, sent: list[str]) -> None:
    assert {client.get(m).state for m in sent} == {State.ACKED}
    dead = [t for t in client.topics() if t.topic == f"{topic}.dlq"]
    assert all(t.pending == 0 and t.fired_unacked == 0 for t in dead), dead


def test_a_rolling_stop_hands_every_message_once_and_dead_letters_none(make_server):
    server = make_server(max_attempts=1)  # the ack timeout is 30 s: never reached here
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as client:
        sent = _fire_now(client, "rolling", 2 * PREFETCH)
        handled: list[tuple[str, str, int]] = []  # (consumer, message id, attempt)
        lock = threading.Lock()
        stop_old, stop_new = threading.Event(), threading.Event()
        old_started = threading.Event()

        def handler(name: str, stop: threading.Event):
            def handle(message):
                with lock:
                    handled.append((name, message.message_id, message.attempt))
                    done = len(handled)
                if name == "old":
                    old_started.set()
                    time.sleep(0.05)  # slow: most of its prefetch is still waiting
                if done >= len(sent):
                    stop_new.set()

            return handle

        old_acked: list[int] = []
        old = threading.Thread(
            target=lambda: old_acked.append(
                client.consume("rolling", handler("old", stop_old), concurrency=2,
                               max_in_flight=PREFETCH, stop=stop_old)
            )
        )  # fmt: skip
        old.start()
        assert old_started.wait(WAIT_S)
        new = threading.Thread(
            target=lambda: client.consume(
                "rolling", handler("new", stop_new), max_in_flight=PREFETCH, stop=stop_new
            )
        )
        new.start()  # the new one is up (its share taken) before the old one stops
        stop_old.set()
        old.join(WAIT_S)
        stop_new.wait(WAIT_S)  # on today's code it never sees the dead-lettered ones
        stop_new.set()
        new.join(WAIT_S)
        assert not old.is_alive() and not new.is_alive()

        by_old = [m for name, m, _ in handled if name == "old"]
        assert 0 < len(by_old) < PREFETCH and old_acked == [len(by_old)]
        assert sorted(m for _, m, _ in handled) == sorted(sent)  # each exactly once
        assert {attempt for _, _, attempt in handled} == {1}
        _nothing_dead_lettered(client, "rolling", sent)
        assert client.stats().unacked == 0


def test_an_async_consumer_stop_releases_its_prefetch(make_server):
    server = make_server(max_attempts=1)
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as sync_client:
        sent = _fire_now(sync_client, "stopping", PREFETCH)

    async def main() -> list[tuple[str, int]]:
        handled: list[tuple[str, int]] = []
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            stop = asyncio.Event()

            async def first(message):
                handled.append((message.message_id, message.attempt))
                await asyncio.sleep(0.05)
                stop.set()  # after the first: the rest of the prefetch is unstarted

            assert await client.consume("stopping", first, max_in_flight=PREFETCH, stop=stop) == 1
            rest = asyncio.Event()

            async def second(message):
                handled.append((message.message_id, message.attempt))
                if len(handled) >= len(sent):
                    rest.set()

            consumer = asyncio.create_task(client.consume("stopping", second, stop=rest))
            await asyncio.wait({consumer}, timeout=WAIT_S)
            rest.set()  # on today's code the second one waits for dead-lettered messages
            await consumer
        return handled

    handled = asyncio.run(main())
    assert sorted(m for m, _ in handled) == sorted(sent)
    assert {attempt for _, attempt in handled} == {1}
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as client:
        _nothing_dead_lettered(client, "stopping", sent)
