"""Retry backoff in the delivery hub, in virtual time on real RocksDB (no threads): a
failed attempt (a nack, an ack timeout) is delivered again only once its backoff has
passed, by the message's own policy or else the server's; an ended stream redelivers at
once; a nack's own redeliver_after_ms wins; and a poison message with the default policy
reaches its dead-letter topic after max_attempts, its history in the trace."""

from __future__ import annotations

import pytest

from timerwheel.common import State
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.retry import RetryKind, RetryPolicy
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.trace import TraceKind

ACK_TIMEOUT_MS = 5_000
DRAW = 0.5  # every jitter draw: the default policy's 20% jitter takes 10% off each wait


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
def hub(tmp_path, clock):
    settings = Settings(
        data_dir=str(tmp_path / "data"), sync_writes=False, ack_timeout_ms=ACK_TIMEOUT_MS,
        first_delivery_hold_ms=0,
    )  # fmt: skip
    engine = Engine(settings, clock, background=False)
    made = DeliveryHub(engine, settings, clock.now_ms, background=False, random01=lambda: DRAW)
    yield made
    made.close()
    engine.close()


def send(hub: DeliveryHub, message_id: str, options: SendOptions | None = None) -> None:
    hub.engine.send_batch([SendSpec("jobs", b"b", When(WhenKind.DELAY, 0), message_id=message_id,
                                    options=options)])  # fmt: skip


def take(hub: DeliveryHub, subscriber) -> list[tuple[str, int]]:
    return [(d.fired.message_id, d.attempt) for d in hub.next_batch(subscriber, 0)]


def wait_out(hub, subscriber, clock, wait_ms: int) -> list[tuple[str, int]]:
    """Nothing until `wait_ms` has passed (1 ms short of it: nothing), then the batch."""
    clock.advance(wait_ms - 1)
    assert take(hub, subscriber) == []
    clock.advance(1)
    return take(hub, subscriber)


def test_a_poison_message_backs_off_by_the_default_policy_then_is_dead_lettered(hub, clock):
    """Default policy: exponential from 1s, x2, 20% jitter (the draw takes 10% off)."""
    send(hub, "poison", SendOptions(max_attempts=4))
    subscriber = hub.subscribe("jobs", 10)
    assert take(hub, subscriber) == [("poison", 1)]
    assert hub.nack("jobs", ["poison"], "boom") == (1, 0)
    assert wait_out(hub, subscriber, clock, 900) == [("poison", 2)]  # 1s - 10%
    assert hub.nack("jobs", ["poison"], "boom") == (1, 0)
    assert wait_out(hub, subscriber, clock, 1_800) == [("poison", 3)]  # 2s - 10%
    clock.advance(ACK_TIMEOUT_MS)  # an ack timeout backs off as a nack does
    assert take(hub, subscriber) == []  # the deadline passed: failed, now backing off
    assert wait_out(hub, subscriber, clock, 3_600) == [("poison", 4)]  # 4s - 10%
    assert hub.nack("jobs", ["poison"], "boom") == (1, 1)  # its 4th: out of attempts
    dead = hub.engine.get("poison", include_trace=True)
    assert (dead.topic, dead.state) == ("jobs.dlq", State.FIRED)
    assert dead.properties["timerwheel.dead_letter.attempts"] == "4"
    delivered = [e for e in dead.trace if e.kind is TraceKind.DELIVERED]
    failed = [e for e in dead.trace if e.kind is TraceKind.NACKED]
    assert [e.attempt for e in delivered] == [1, 2, 3, 4]
    assert [e.detail for e in failed] == ["boom", "boom", "ack timeout", "boom"]
    assert TraceKind.DEAD_LETTERED in {e.kind for e in dead.trace}


def test_a_message_s_own_policy_wins_over_the_server_s(hub, clock):
    fixed = RetryPolicy(RetryKind.FIXED, 200, 200, 1.0, 0)
    send(hub, "own", SendOptions(retry=fixed))
    subscriber = hub.subscribe("jobs", 10)
    assert take(hub, subscriber) == [("own", 1)]
    for attempt in (2, 3, 4):
        hub.nack("jobs", ["own"])
        assert wait_out(hub, subscriber, clock, 200) == [("own", attempt)]


def test_an_ended_stream_redelivers_at_once_and_a_nack_s_own_backoff_wins(hub, clock):
    send(hub, "m")
    leaving = hub.subscribe("jobs", 10)
    assert take(hub, leaving) == [("m", 1)]
    hub.release(leaving)  # the consumer went away: not the message's fault
    subscriber = hub.subscribe("jobs", 10)
    assert take(hub, subscriber) == [("m", 2)]
    hub.nack("jobs", ["m"], redeliver_after_ms=50)  # the client's own wait, not 2s
    assert wait_out(hub, subscriber, clock, 50) == [("m", 3)]


def test_no_backoff_when_the_server_s_initial_wait_is_zero(tmp_path, clock):
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False, retry_initial_ms=0)
    engine = Engine(settings, clock, background=False)
    hub = DeliveryHub(engine, settings, clock.now_ms, background=False)
    try:
        send(hub, "m")
        subscriber = hub.subscribe("jobs", 10)
        assert take(hub, subscriber) == [("m", 1)]
        hub.nack("jobs", ["m"])
        assert take(hub, subscriber) == [("m", 2)]
    finally:
        hub.close()
        engine.close()
