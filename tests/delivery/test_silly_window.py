"""Silly-window avoidance in the delivery hub (delivery/dispatcher.py `holds_back`), in
virtual time on real RocksDB, without threads: a subscriber that a batch filled gets its
next batch once a quarter of its window is free again (while that many wait), not one a
freed slot; a lightly loaded subscriber, and one with nothing more coming, gets each
message at once."""

from __future__ import annotations

import pytest

from timerwheel.delivery.dispatcher import reopen_room
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

WINDOW = 16  # max_in_flight: its reopen room is 4


@pytest.fixture
def hub(tmp_path):
    clock = VirtualClock()
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False)
    engine = Engine(settings, clock, background=False)
    hub = DeliveryHub(engine, settings, clock.now_ms, background=False)
    yield hub
    hub.close()
    engine.close()


def fire(hub: DeliveryHub, count: int) -> None:
    specs = [SendSpec("jobs", b"m", When(WhenKind.DELAY, 0)) for _ in range(count)]
    hub.engine.send_batch(specs)


def ids(batch) -> list[str]:
    return [delivered.fired.message_id for delivered in batch]


def count_wakes(hub: DeliveryHub, subscriber) -> list[int]:
    """How often the topic's waiting subscribers are woken (notify_all calls)."""
    cond = subscriber._dispatcher.cond
    wakes = [0]
    notify_all = cond.notify_all

    def counted() -> None:
        wakes[0] += 1
        notify_all()

    cond.notify_all = counted
    return wakes


def test_reopen_room_is_a_quarter_of_the_window_within_one_batch():
    assert reopen_room(1, 2_000) == 1
    assert reopen_room(4, 2_000) == 1
    assert reopen_room(16, 2_000) == 4
    assert reopen_room(2_000, 2_000) == 500
    assert reopen_room(100_000, 2_000) == 2_000
    assert reopen_room(16, 3) == 3


def test_a_full_subscriber_acking_one_at_a_time_gets_no_one_message_batches(hub):
    fire(hub, 100)
    subscriber = hub.subscribe("jobs", WINDOW)
    held = ids(hub.next_batch(subscriber, timeout_s=0))
    assert len(held) == WINDOW
    wakes = count_wakes(hub, subscriber)
    sizes = []
    acks_that_woke = 0
    while held:
        before = wakes[0]
        hub.ack("jobs", [held.pop(0)])  # one at a time, reading after each Ack
        acks_that_woke += wakes[0] > before
        batch = ids(hub.next_batch(subscriber, timeout_s=0))
        if batch:
            sizes.append(len(batch))
            held += batch
    assert subscriber.in_flight == 0 and hub.unacked() == 0
    # 84 waited behind the first window: 21 batches of the reopen room, none smaller.
    assert sizes == [4] * 21
    # An Ack wakes the stream as its room reaches 4, never in between: before each batch,
    # and once in the last window (with nothing left to hand out): 22 of 100 Acks.
    assert acks_that_woke == 22


def test_a_batch_goes_out_once_room_reaches_the_threshold(hub):
    fire(hub, 40)
    subscriber = hub.subscribe("jobs", WINDOW)
    held = ids(hub.next_batch(subscriber, timeout_s=0))
    for _ in range(3):
        hub.ack("jobs", [held.pop(0)])
        assert hub.next_batch(subscriber, timeout_s=0) == []
    hub.ack("jobs", [held.pop(0)])
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 4
    assert subscriber.in_flight == WINDOW
    hub.ack("jobs", held[:2])  # full again: an Ack of two frees too little
    assert hub.next_batch(subscriber, timeout_s=0) == []


def test_nothing_is_held_back_when_fewer_than_the_threshold_wait(hub):
    fire(hub, WINDOW + 2)
    subscriber = hub.subscribe("jobs", WINDOW)
    held = ids(hub.next_batch(subscriber, timeout_s=0))
    hub.ack("jobs", [held.pop(0)])
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 1  # 2 waiting: nothing joins them
    hub.ack("jobs", [held.pop(0)])
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 1
    hub.ack("jobs", [held.pop(0)])
    assert hub.next_batch(subscriber, timeout_s=0) == []  # nothing waits at all
    fire(hub, 1)  # a message fired later goes out at once, to a window one short
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 1


def test_what_fired_meanwhile_counts_as_waiting(hub):
    fire(hub, WINDOW)
    subscriber = hub.subscribe("jobs", WINDOW)
    held = ids(hub.next_batch(subscriber, timeout_s=0))
    fire(hub, 10)  # still in the store when the Ack comes
    hub.ack("jobs", [held.pop(0)])
    assert hub.next_batch(subscriber, timeout_s=0) == []
    hub.ack("jobs", held[:3])
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 4


def test_a_subscriber_that_was_not_full_gets_each_message_at_once(hub):
    subscriber = hub.subscribe("jobs", WINDOW)
    for held in range(1, WINDOW + 1):  # lightly loaded: each fire is delivered, none acked
        fire(hub, 1)
        assert len(hub.next_batch(subscriber, timeout_s=0)) == 1
        assert subscriber.in_flight == held
    idle = hub.subscribe("jobs", WINDOW)
    fire(hub, 1)
    assert len(hub.next_batch(idle, timeout_s=0)) == 1  # a first delivery, at once


def test_a_full_subscriber_whose_window_emptied_gets_what_there_is(hub):
    fire(hub, WINDOW + 30)
    subscriber = hub.subscribe("jobs", WINDOW)
    held = ids(hub.next_batch(subscriber, timeout_s=0))
    hub.ack("jobs", held)
    assert len(hub.next_batch(subscriber, timeout_s=0)) == WINDOW


def test_a_small_window_still_reopens_on_each_freed_slot(hub):
    fire(hub, 10)
    subscriber = hub.subscribe("jobs", 3)  # reopen room 1: as without the threshold
    held = ids(hub.next_batch(subscriber, timeout_s=0))
    assert len(held) == 3
    hub.ack("jobs", [held.pop(0)])
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 1
