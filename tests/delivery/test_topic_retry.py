"""Per-topic delivery defaults in the delivery hub, in virtual time on real RocksDB (no
threads): a message's own retry policy and max_attempts win over its topic's table,
which wins over the server's settings, field by field; and a poison message on a topic
with a table backs off by it and reaches its dead-letter topic after the topic's
max_attempts, with its history."""

from __future__ import annotations

import itertools

import pytest

from timerwheel.common import State
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.retry import RetryKind, RetryPolicy
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.topic_policy import TopicSettings
from timerwheel.wheels.trace import TraceKind

ACK_TIMEOUT_MS = 30_000
DRAW = 0.5  # every jitter draw: takes half of each policy's jitter_percent off its wait
TOPICS = (
    # fixed 400ms, no jitter, 3 attempts
    TopicSettings("jobs", max_attempts=3, backoff="fixed", initial_ms=400, jitter_percent=0),
    # exponential from 2s, x3, capped at 10s, 50% jitter (the draw takes 25% off); the
    # limit is the server's
    TopicSettings("mail", initial_ms=2_000, multiplier=3.0, max_ms=10_000, jitter_percent=50),
)


@pytest.fixture
def clock():
    return VirtualClock()


@pytest.fixture
def hub(tmp_path, clock):
    settings = Settings(
        data_dir=str(tmp_path / "data"), sync_writes=False, ack_timeout_ms=ACK_TIMEOUT_MS,
        first_delivery_hold_ms=0, max_attempts=5, topics=TOPICS,
        # the server's policy: exponential from 1s, x2, no jitter
        retry_jitter_percent=0,
    )  # fmt: skip
    engine = Engine(settings, clock, background=False)
    made = DeliveryHub(engine, settings, clock.now_ms, background=False, random01=lambda: DRAW)
    yield made
    made.close()
    engine.close()


def send(hub, topic: str, message_id: str, options: SendOptions | None = None) -> None:
    spec = SendSpec(topic, b"b", When(WhenKind.DELAY, 0), message_id=message_id, options=options)
    hub.engine.send_batch([spec])


def take(hub, subscriber) -> list[tuple[str, int]]:
    return [(d.fired.message_id, d.attempt) for d in hub.next_batch(subscriber, 0)]


def wait_out(hub, subscriber, clock, wait_ms: int) -> list[tuple[str, int]]:
    """Nothing until `wait_ms` has passed (1 ms short of it: nothing), then the batch."""
    clock.advance(wait_ms - 1)
    assert take(hub, subscriber) == []
    clock.advance(1)
    return take(hub, subscriber)


def test_the_topic_s_policy_applies_where_the_send_names_none(hub, clock):
    send(hub, "jobs", "plain")
    subscriber = hub.subscribe("jobs", 10)
    assert take(hub, subscriber) == [("plain", 1)]
    hub.nack("jobs", ["plain"], "boom")
    assert wait_out(hub, subscriber, clock, 400) == [("plain", 2)]  # the topic's, not 1s
    clock.advance(ACK_TIMEOUT_MS)  # an ack timeout waits the topic's backoff too
    assert take(hub, subscriber) == []
    assert wait_out(hub, subscriber, clock, 400) == [("plain", 3)]
    assert hub.nack("jobs", ["plain"], "boom") == (1, 1)  # the topic's limit: 3
    assert hub.engine.get("plain").topic == "jobs.dlq"


def test_the_send_s_own_options_win_field_by_field(hub, clock):
    own_retry = RetryPolicy(RetryKind.FIXED, 100, 100, 1.0, 0)
    send(hub, "jobs", "own", SendOptions(retry=own_retry))  # own policy, the topic's limit
    send(hub, "jobs", "limited", SendOptions(max_attempts=1))  # own limit, the topic's policy
    send(hub, "jobs", "unlimited", SendOptions(max_attempts=0))  # 0: unlimited wins over 3
    subscriber = hub.subscribe("jobs", 10)
    assert sorted(take(hub, subscriber)) == [("limited", 1), ("own", 1), ("unlimited", 1)]
    assert hub.nack("jobs", ["own", "limited", "unlimited"]) == (3, 1)  # "limited": out
    assert hub.engine.get("limited").topic == "jobs.dlq"
    assert wait_out(hub, subscriber, clock, 100) == [("own", 2)]  # its own 100ms
    assert wait_out(hub, subscriber, clock, 300) == [("unlimited", 2)]  # the topic's 400ms
    for attempt in (3, 4, 5):  # past the topic's limit of 3
        hub.nack("jobs", ["unlimited"])
        assert wait_out(hub, subscriber, clock, 400) == [("unlimited", attempt)]
    hub.nack("jobs", ["own"])
    assert wait_out(hub, subscriber, clock, 100) == [("own", 3)]
    assert hub.nack("jobs", ["own"]) == (1, 1)  # its 3rd: the topic's limit


def test_a_topic_without_a_table_has_the_server_s_settings(hub, clock):
    send(hub, "other", "m")
    subscriber = hub.subscribe("other", 10)
    assert take(hub, subscriber) == [("m", 1)]
    for attempt, wait_ms in ((2, 1_000), (3, 2_000), (4, 4_000), (5, 8_000)):
        hub.nack("other", ["m"])
        assert wait_out(hub, subscriber, clock, wait_ms) == [("m", attempt)]
    assert hub.nack("other", ["m"]) == (1, 1)  # the server's max_attempts: 5


def test_a_poison_message_backs_off_by_its_topic_s_policy_then_is_dead_lettered(hub, clock):
    """The topic "mail": 2s x3 capped at 10s, the draw taking 25% off each wait; the server's
    limit of 5 attempts."""
    send(hub, "mail", "poison")
    subscriber = hub.subscribe("mail", 10)
    assert take(hub, subscriber) == [("poison", 1)]
    delivered_at = [clock.now_ms()]
    for attempt, wait_ms in ((2, 1_500), (3, 4_500), (4, 7_500), (5, 7_500)):  # 2s, 6s, 10s cap
        assert hub.nack("mail", ["poison"], "boom") == (1, 0)
        assert wait_out(hub, subscriber, clock, wait_ms) == [("poison", attempt)]
        delivered_at.append(clock.now_ms())
    assert hub.nack("mail", ["poison"], "boom") == (1, 1)
    dead = hub.engine.get("poison", include_trace=True)
    assert (dead.topic, dead.state) == ("mail.dlq", State.FIRED)
    assert dead.properties["timerwheel.dead_letter.attempts"] == "5"
    delivered = [e for e in dead.trace if e.kind is TraceKind.DELIVERED]
    assert [e.attempt for e in delivered] == [1, 2, 3, 4, 5]
    gaps = [b - a for a, b in itertools.pairwise(delivered_at)]
    assert gaps == [1_500, 4_500, 7_500, 7_500]
    assert [e.detail for e in dead.trace if e.kind is TraceKind.NACKED] == ["boom"] * 5
    assert TraceKind.DEAD_LETTERED in {e.kind for e in dead.trace}
