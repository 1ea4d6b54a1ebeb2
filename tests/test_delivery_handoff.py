"""How a fire reaches a waiting subscriber (server/delivery.py, module docstring): the
writer's own thread marks the topic's dispatcher when its lock is free, and hands the
topic to the delivery thread when it is not, never waiting for the lock. A real engine
(threaded writer, RocksDB in a temp dir) and a hub with its delivery thread."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from conftest import WAIT_S

from engine.engine import Engine
from server.delivery import DeliveryHub
from wheels.clock import VirtualClock
from wheels.domain import SendSpec, When, WhenKind
from wheels.settings import MINUTE_MS, Settings

T0 = 1_700_002_800_000 - 30 * MINUTE_MS


@pytest.fixture
def hub(tmp_path):
    settings = Settings(data_dir=str(tmp_path / "d"))
    clock = VirtualClock(T0)  # sends due at once fire in their own commit: no waiting
    engine = Engine(settings, clock, background=True)
    made = DeliveryHub(engine, settings, clock.now_ms)
    yield made
    made.close()
    engine.close()


def fire_now(engine: Engine, body: bytes) -> str:
    return engine.send(SendSpec("jobs", body, When(WhenKind.DELAY, 0))).message_id


def test_a_fire_reaches_a_waiting_subscriber_without_the_delivery_thread(hub):
    hub._fired.put(None)  # ends the delivery thread: only the writer's thread is left
    hub._thread.join(WAIT_S)
    subscriber = hub.subscribe("jobs", 10)
    assert hub.next_batch(subscriber, timeout_s=0) == []  # read up: nothing is dirty now

    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(fire_now, hub.engine, b"a")
        batch = hub.next_batch(subscriber, timeout_s=WAIT_S)

    assert [d.fired.timer.message_id for d in batch] == [sent.result()]


def test_the_writer_never_waits_for_a_busy_dispatcher_the_delivery_thread_marks_it(hub):
    subscriber = hub.subscribe("jobs", 10)
    assert hub.next_batch(subscriber, timeout_s=0) == []
    dispatcher = subscriber._dispatcher

    with ThreadPoolExecutor(1) as pool, dispatcher.cond:  # a subscriber thread's hold
        first = pool.submit(fire_now, hub.engine, b"a").result(timeout=WAIT_S)
        # The writer runs the first commit's listener before its next commit: this one
        # returning proves that listener found the lock busy and went on.
        second = pool.submit(fire_now, hub.engine, b"b").result(timeout=WAIT_S)

    got: list[str] = []
    while len(got) < 2:
        batch = hub.next_batch(subscriber, timeout_s=WAIT_S)
        assert batch, f"only {got} delivered"
        got += [d.fired.timer.message_id for d in batch]
    assert got == [first, second]
