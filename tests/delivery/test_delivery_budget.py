"""The delivery hub's byte budget (Settings.max_delivery_bytes), in virtual time on real
RocksDB: dispatchers stop reading fired messages while the bodies they hold reach it,
acks make room again, and a topic holding nothing still gets one message of any size."""

from __future__ import annotations

import pytest
from helpers.wakes import CountingCondition

from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

BODY = 1_000


@pytest.fixture
def hub(tmp_path):
    clock = VirtualClock()
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False,
                        max_delivery_bytes=3 * BODY)  # fmt: skip
    engine = Engine(settings, clock, background=False)
    made = DeliveryHub(engine, settings, clock.now_ms, background=False)
    yield made
    made.close()
    engine.close()


def fire(hub: DeliveryHub, topic: str, count: int, body_bytes: int = BODY) -> list[str]:
    specs = [SendSpec(topic, b"x" * body_bytes, When(WhenKind.DELAY, 0)) for _ in range(count)]
    return [result.message_id for result in hub.engine.send_batch(specs)]


def test_reads_stop_at_the_byte_budget_and_acks_make_room(hub):
    sent = fire(hub, "jobs", 10)
    subscriber = hub.subscribe("jobs", 10)
    first = hub.next_batch(subscriber, timeout_s=0)
    assert [d.fired.message_id for d in first] == sent[:3]  # 3 x 1,000 B: the budget
    assert hub.budget.held == 3 * BODY
    assert hub.next_batch(subscriber, timeout_s=0) == []  # room for 7, but no bytes
    assert hub.ack("jobs", sent[:2]) == 2
    second = hub.next_batch(subscriber, timeout_s=0)
    assert [d.fired.message_id for d in second] == sent[3:5]
    assert hub.budget.held == 3 * BODY


def test_an_ack_freeing_bytes_a_read_stopped_at_wakes_the_subscriber(hub):
    """Its subscriber has room, so the Ack's arrival does not wake it; once the Ack is
    durable its bodies leave the budget, and the read that stopped there can go on."""
    sent = fire(hub, "jobs", 10)
    subscriber = hub.subscribe("jobs", 10)
    assert len(hub.next_batch(subscriber, timeout_s=0)) == 3
    assert hub.next_batch(subscriber, timeout_s=0) == []  # short of bytes, not of room
    wakes = hub._topics["jobs"].cond = CountingCondition()
    assert hub.ack("jobs", sent[:1]) == 1
    assert wakes.notified == 1
    assert [d.fired.message_id for d in hub.next_batch(subscriber, timeout_s=0)] == [sent[3]]


def test_an_ack_in_one_topic_wakes_a_read_of_another_stopped_at_the_budget(hub):
    """The budget is the hub's, so bytes one topic's ack frees let another's read go on:
    its subscriber is woken then, not at its next idle check (IDLE_WAKE_S)."""
    jobs = fire(hub, "jobs", 2)
    fire(hub, "reports", 3)
    busy = hub.subscribe("jobs", 10)
    reader = hub.subscribe("reports", 10)
    assert len(hub.next_batch(busy, timeout_s=0)) == 2
    assert len(hub.next_batch(reader, timeout_s=0)) == 1  # 3 x 1,000 B: the budget
    assert hub.next_batch(reader, timeout_s=0) == []  # short of bytes, not of room
    reports_wakes = hub._topics["reports"].cond = CountingCondition()
    assert hub.ack("jobs", jobs[:1]) == 1
    assert reports_wakes.notified == 1
    assert len(hub.next_batch(reader, timeout_s=0)) == 1  # the freed 1,000 B
    hub.ack("jobs", jobs[1:])
    assert reports_wakes.notified == 2
    assert len(hub.next_batch(reader, timeout_s=0)) == 1
    assert hub.next_batch(reader, timeout_s=0) == []  # nothing left: no more wakes due
    hub.ack("jobs", jobs)  # acked already: frees nothing
    assert reports_wakes.notified == 2


def test_a_topic_holding_nothing_gets_one_message_over_the_budget(hub):
    fire(hub, "jobs", 5)
    busy = hub.subscribe("jobs", 10)
    assert len(hub.next_batch(busy, timeout_s=0)) == 3  # the budget is used up
    big, _ = fire(hub, "reports", 2, body_bytes=10 * BODY)
    reader = hub.subscribe("reports", 10)
    [delivered] = hub.next_batch(reader, timeout_s=0)
    assert delivered.fired.message_id == big  # one, though it alone is over
    assert hub.next_batch(reader, timeout_s=0) == []  # not a second
    assert hub.budget.held == 3 * BODY + 10 * BODY
