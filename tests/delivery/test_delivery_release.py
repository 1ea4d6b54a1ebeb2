"""Release (a Nack with `release`): a consumer that stops gives back messages it never
started. Not a failed attempt: the attempt number stays, `max_attempts` is never reached,
the message goes at once to the topic's other subscribers, and the releasing stream is
handed no more and ends once it holds none (issue 78: a clean stop dead-lettered healthy
prefetched messages at `max_attempts=1`)."""

from __future__ import annotations

import pytest

from timerwheel.delivery import attempts
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import InvalidArgument, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings


@pytest.fixture
def hub(tmp_path):
    clock = VirtualClock()
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False, max_attempts=1)
    engine = Engine(settings, clock, background=False)
    delivery = DeliveryHub(engine, settings, clock.now_ms, background=False)
    try:
        yield delivery
    finally:
        delivery.close()
        engine.close()


def fire(hub: DeliveryHub, count: int) -> list[str]:
    specs = [SendSpec("jobs", b"x", When(WhenKind.DELAY, 0)) for _ in range(count)]
    return [result.message_id for result in hub.engine.send_batch(specs)]


def taken(hub: DeliveryHub, subscriber) -> list[tuple[str, int]]:
    batch = hub.next_batch(subscriber, timeout_s=0)
    assert batch is not None
    return [(d.fired.message_id, d.attempt) for d in batch]


def test_a_release_keeps_the_attempt_and_never_dead_letters(hub, monkeypatch):
    failed: list[str] = []
    real_fail = attempts.fail

    def counted_fail(topic, entry, message_id, *args, **kwargs):
        failed.append(message_id)
        return real_fail(topic, entry, message_id, *args, **kwargs)

    monkeypatch.setattr(attempts, "fail", counted_fail)  # every failed attempt goes here
    sent = fire(hub, 3)
    for _ in range(5):  # far more than max_attempts=1: a release is not an attempt
        stopping = hub.subscribe("jobs", 10)
        assert taken(hub, stopping) == [(m, 1) for m in sent]
        assert hub.nack("jobs", sent, release=True) == (3, 0)
        hub.release(stopping)  # its stream ends: it held nothing, so nothing fails
    assert failed == []
    assert hub.unacked() == 3  # none acked, none dead-lettered
    last = hub.subscribe("jobs", 10)
    assert taken(hub, last) == [(m, 1) for m in sent]
    assert hub.ack("jobs", sent) == 3


def test_released_messages_go_to_the_others_and_the_releaser_ends(hub):
    sent = fire(hub, 4)
    stopping = hub.subscribe("jobs", 10)
    assert [m for m, _ in taken(hub, stopping)] == sent
    other = hub.subscribe("jobs", 10)
    assert hub.nack("jobs", sent[2:], release=True) == (2, 0)
    assert taken(hub, other) == [(m, 1) for m in sent[2:]]  # at once, same attempt
    # Draining: handed nothing more (the two it released are the other's now) ...
    assert hub.next_batch(stopping, timeout_s=0) == []
    assert hub.ack("jobs", sent[:1]) == 1
    assert hub.nack("jobs", sent[1:2], reason="handler failed") == (1, 1)  # a real failure
    assert hub.next_batch(stopping, timeout_s=0) is None  # ... and ends once it holds none
    hub.release(stopping)
    assert hub.ack("jobs", sent[2:]) == 2


def test_a_release_of_ids_not_in_flight_is_ignored(hub):
    sent = fire(hub, 1)
    subscriber = hub.subscribe("jobs", 10)
    assert hub.nack("jobs", ["never-sent"], release=True) == (0, 0)
    assert taken(hub, subscriber) == [(sent[0], 1)]
    assert hub.nack("other", sent, release=True) == (0, 0)  # another topic's
    assert hub.next_batch(subscriber, timeout_s=0) == []  # not draining: nothing released
    assert hub.ack("jobs", sent) == 1
    assert hub.nack("jobs", sent, release=True) == (0, 0)  # acked: nothing to give back


def test_a_release_refuses_a_reason_or_a_backoff(hub):
    with pytest.raises(InvalidArgument, match="redeliver_after_ms=1000"):
        hub.nack("jobs", ["x"], redeliver_after_ms=1_000, release=True)
    with pytest.raises(InvalidArgument, match="reason='why'"):
        hub.nack("jobs", ["x"], reason="why", release=True)
