"""A topic dispatcher's reads of the store (delivery/dispatcher.py), in virtual time on real
RocksDB: a read that comes back short is handed out before the store is read again, and
a read cut at its byte budget reads on."""

from __future__ import annotations

import pytest

from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

BODY = 1_000


def make_hub(tmp_path, **settings_fields) -> DeliveryHub:
    clock = VirtualClock()
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False, **settings_fields)
    engine = Engine(settings, clock, background=False)
    return DeliveryHub(engine, settings, clock.now_ms, background=False)


@pytest.fixture
def hubs(tmp_path):
    made = []

    def make(**settings_fields) -> DeliveryHub:
        made.append(make_hub(tmp_path / str(len(made)), **settings_fields))
        return made[-1]

    yield make
    for hub in made:
        hub.close()
        hub.engine.close()


def fire(hub: DeliveryHub, count: int) -> list[str]:
    specs = [SendSpec("jobs", b"x" * BODY, When(WhenKind.DELAY, 0)) for _ in range(count)]
    return [result.message_id for result in hub.engine.send_batch(specs)]


def count_reads(hub: DeliveryHub) -> list[int]:
    """The engine's real reads, each one's row count noted as it returns."""
    reads: list[int] = []
    read = hub.engine.fetch_deliveries

    def counted(*args):
        rows = read(*args)
        reads.append(len(rows))
        return rows

    hub.engine.fetch_deliveries = counted
    return reads


def ids(batch) -> list[str]:
    return [delivered.fired.message_id for delivered in batch]


def test_a_short_read_is_handed_out_and_the_empty_read_comes_with_the_next_call(hubs):
    hub = hubs()
    sent = fire(hub, 5)
    subscriber = hub.subscribe("jobs", 10)
    reads = count_reads(hub)
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == sent
    assert reads == [5]  # short of its limit: no read that finds the store empty first
    assert hub.next_batch(subscriber, timeout_s=0) == []
    assert reads == [5, 0]
    assert hub.next_batch(subscriber, timeout_s=0) == []
    assert reads == [5, 0]  # nothing fired since: the store is not read again
    more = fire(hub, 2)
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == more
    assert reads == [5, 0, 2]


def test_a_read_cut_at_its_byte_budget_reads_on_in_the_same_call(hubs):
    """Two bodies make a read's budget, so five messages take three reads, all before
    the batch (itself two bodies) is handed out; the next call finds the store empty,
    and the rest follow from memory."""
    hub = hubs(delivery_batch_bytes=2 * BODY)
    sent = fire(hub, 5)
    subscriber = hub.subscribe("jobs", 10)
    reads = count_reads(hub)
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == sent[:2]
    assert reads == [2, 2, 1]
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == sent[2:4]
    assert reads == [2, 2, 1, 0]
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == sent[4:]
    assert hub.next_batch(subscriber, timeout_s=0) == []
    assert reads == [2, 2, 1, 0]


def test_queue_slots_acked_while_queued_do_not_count_as_read(hubs):
    """Five of the ten queued messages are acked before anyone is handed them: their
    slots are stale, so the window of ten is filled from the five still live and five
    that fired since, not cut to the five the queue still holds."""
    hub = hubs()
    sent = fire(hub, 20)
    subscriber = hub.subscribe("jobs", 10)
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == sent[:10]  # sent[10:] queued
    assert hub.ack("jobs", sent[:10]) == 10
    assert hub.ack("jobs", sent[10:15]) == 5  # acked while queued
    more = fire(hub, 5)
    assert ids(hub.next_batch(subscriber, timeout_s=0)) == sent[15:] + more
