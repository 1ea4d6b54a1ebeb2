"""The delivery hub's Ack: a subscriber's room comes back when the Ack arrives, while the
engine makes it durable; an Ack the engine refuses leaves everything in flight as before
it. In virtual time on real RocksDB, the hub and engine without threads: the engine's
ack is wrapped to look at the hub from inside it, where a threaded server would be
waiting on the group commit and its fsync."""

from __future__ import annotations

import pytest
from helpers.wakes import CountingCondition

from timerwheel.common import State
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import InvalidArgument, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

ACK_TIMEOUT_MS = 5_000


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
def hub(tmp_path, clock):
    # retry_initial_ms=0: a failed attempt is redelivered at once, so these tests see
    # redeliveries without waiting out a backoff (tests/delivery/test_retry_backoff.py).
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False,
                        ack_timeout_ms=ACK_TIMEOUT_MS, retry_initial_ms=0)  # fmt: skip
    engine = Engine(settings, clock, background=False)
    made = DeliveryHub(engine, settings, clock.now_ms, background=False)
    yield made
    made.close()
    engine.close()


def fire(hub: DeliveryHub, count: int) -> list[str]:
    specs = [SendSpec("jobs", b"body", When(WhenKind.DELAY, 0)) for _ in range(count)]
    return [result.message_id for result in hub.engine.send_batch(specs)]


def take(hub: DeliveryHub, subscriber) -> list[tuple[str, int]]:
    return [(d.fired.message_id, d.attempt) for d in hub.next_batch(subscriber, 0)]


def test_the_room_an_ack_frees_is_free_while_the_engine_makes_it_durable(hub, monkeypatch):
    sent = fire(hub, 4)
    subscriber = hub.subscribe("jobs", 2)
    assert take(hub, subscriber) == [(sent[0], 1), (sent[1], 1)]
    assert take(hub, subscriber) == []  # no room: both in flight
    seen_inside: list[tuple[str, int]] = []
    durable_ack = hub.engine.ack

    def ack_looking_at_the_hub(topic: str, message_ids: list[str], first_deliveries=None):
        seen_inside.extend(take(hub, subscriber))
        return durable_ack(topic, message_ids, first_deliveries)

    monkeypatch.setattr(hub.engine, "ack", ack_looking_at_the_hub)
    assert hub.ack("jobs", sent[:2]) == 2
    assert seen_inside == [(sent[2], 1), (sent[3], 1)]
    assert subscriber.in_flight == 2  # the two taken inside, not the two acked
    assert hub.engine.get(sent[0]).state is State.ACKED


def test_a_refused_ack_leaves_its_messages_in_flight_until_their_ack_timeout(hub, clock):
    sent = fire(hub, 3)
    subscriber = hub.subscribe("jobs", 2)
    assert take(hub, subscriber) == [(sent[0], 1), (sent[1], 1)]
    with pytest.raises(InvalidArgument, match="message_ids"):
        hub.ack("jobs", [sent[0], ""])  # the empty id is refused: nothing is acked
    assert subscriber.in_flight == 2
    assert take(hub, subscriber) == []  # still no room
    assert hub.engine.get(sent[0]).state is State.FIRED
    clock.advance(ACK_TIMEOUT_MS)
    assert take(hub, subscriber) == [(sent[0], 2), (sent[1], 2)]  # failed attempts, again


def test_a_message_whose_ack_is_in_progress_is_not_failed_by_its_stream_ending(hub, monkeypatch):
    [message_id] = fire(hub, 1)
    leaving = hub.subscribe("jobs", 1)
    assert take(hub, leaving) == [(message_id, 1)]
    other = hub.subscribe("jobs", 1)
    seen_inside: list[tuple[str, int]] = []
    durable_ack = hub.engine.ack

    def ack_while_the_stream_ends(topic: str, message_ids: list[str], first_deliveries=None):
        hub.release(leaving)  # its stream ends before the ack is durable
        seen_inside.extend(take(hub, other))
        return durable_ack(topic, message_ids, first_deliveries)

    monkeypatch.setattr(hub.engine, "ack", ack_while_the_stream_ends)
    assert hub.ack("jobs", [message_id]) == 1
    assert seen_inside == []  # not handed to the other subscriber as a failed attempt
    assert take(hub, other) == []


def test_an_ack_wakes_the_subscribers_only_when_it_gives_room_to_one_that_had_none(hub):
    """A subscriber with room that waits has nothing to take: an Ack waking it (twice,
    on arrival and once durable) made it take nothing, two thread switches each time."""
    sent = fire(hub, 5)
    roomy = hub.subscribe("jobs", 10)
    assert [m for m, _ in take(hub, roomy)] == sent
    wakes = hub._topics["jobs"].cond = CountingCondition()
    hub.ack("jobs", sent[:2])
    assert wakes.notified == 0  # `roomy` had room before and after
    full = hub.subscribe("jobs", 2)
    later = fire(hub, 2)
    assert [m for m, _ in take(hub, full)] == later  # now it has no room
    wakes.notified = 0  # the fire woke them
    hub.ack("jobs", later[:1])
    assert wakes.notified == 1  # on arrival: `full` has room again; not again once durable
    assert take(hub, full) == []  # nothing else fired: room, no work
    hub.ack("jobs", sent[2:])
    assert wakes.notified == 1
