"""A failed delivery attempt crosses no process while its dispatcher's lock is held.

Under `serve --workers N` the delivery hub runs in its own process and reaches the engine
through `RemoteEngine`, one socket call per engine method. Each failed attempt (a nack, an
ack timeout, a stream that ends) runs `delivery.attempts.fail` with the topic's lock held,
and it needs the message's attempt limit. That limit comes with the fetch
(`Entry.limit`: the server's default, or one call per fetched batch for the few messages
whose own send options set it), so a failure asks the engine nothing: a stream that ends
with a thousand messages in flight used to make a thousand sequential calls under the lock.

Here the hub is built as the delivery process builds it: a `RemoteEngine` over a real
unix socket to a real engine (RocksDB in a temp dir), with the hub's monotonic clock
injected to pass an ack timeout without waiting for it.
"""

from __future__ import annotations

import secrets
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from timerwheel.delivery import attempts
from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.engine.system_clock import SystemClock
from timerwheel.procs.engine_host import EngineHost
from timerwheel.procs.ipc import CallClient, CallServer, PendingCall
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.wheels.domain import SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.topic_policy import TopicSettings

NOW = When(WhenKind.DELAY, 0)
DEFAULT_LIMIT = 4  # Settings.max_attempts: the limit of a message that sets none


class CountingCalls(CallClient):
    """A real CallClient that counts the calls each thread makes."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.by_thread: dict[int, list[str]] = {}
        self._count_lock = threading.Lock()

    def begin(self, method: str, *args: object) -> PendingCall:
        with self._count_lock:
            self.by_thread.setdefault(threading.get_ident(), []).append(method)
        return super().begin(method, *args)

    def made_here(self) -> int:
        with self._count_lock:
            return len(self.by_thread.get(threading.get_ident(), []))


class FakeMonotonic:
    def __init__(self) -> None:
        self.ms = 1_000_000

    def __call__(self) -> int:
        return self.ms


@pytest.fixture
def delivery_process(tmp_path: Path, monkeypatch, request):
    """(engine, hub over a RemoteEngine, the counting calls, the hub's clock, failures):
    `failures` lists, for each failed attempt, the calls it made with the lock held.
    An indirect parameter adds settings (per-topic tables)."""
    settings = Settings(
        data_dir=str(tmp_path / "data"), max_attempts=DEFAULT_LIMIT, ack_timeout_ms=30_000,
        first_delivery_hold_ms=0, retry_initial_ms=0,  # redeliveries at once: no backoff here
        **getattr(request, "param", {}),
    )  # fmt: skip
    engine = Engine(settings, SystemClock())
    host = EngineHost(engine)
    authkey = secrets.token_bytes(32)
    path = str(tmp_path / "engine.sock")
    server = CallServer(path, authkey, host.handle, "engine")
    calls = CountingCalls(path, authkey, "engine")
    remote = RemoteEngine(settings, calls, SystemClock())
    clock = FakeMonotonic()
    hub = DeliveryHub(remote, settings, now_ms=clock, background=False)

    failures: list[int] = []
    real_fail = attempts.fail

    def counted_fail(topic, entry, message_id, *args, **kwargs):
        assert topic.cond._is_owned(), "fail runs with the dispatcher's lock held"
        before = calls.made_here()
        try:
            return real_fail(topic, entry, message_id, *args, **kwargs)
        finally:
            failures.append(calls.made_here() - before)

    monkeypatch.setattr(attempts, "fail", counted_fail)
    try:
        yield engine, hub, calls, clock, failures
    finally:
        hub.close()
        remote.close()
        server.close()
        host.close()
        engine.close()


def deliver(hub: DeliveryHub, subscriber, count: int) -> dict[str, int]:
    """The next `count` deliveries to `subscriber` as {id: attempt}, waiting for fires."""
    got: dict[str, int] = {}
    deadline = time.monotonic() + 20
    while len(got) < count:
        assert time.monotonic() < deadline, f"only {got} of {count} delivered"
        for delivered in hub.next_batch(subscriber, 0.2) or []:
            got[delivered.fired.message_id] = delivered.attempt
    return got


def test_failed_attempts_make_no_call_under_the_lock_and_keep_each_limit(delivery_process):
    engine, hub, calls, clock, failures = delivery_process
    engine.send_batch(
        [
            SendSpec("t", b"a", NOW, message_id="plain"),  # the server's limit: 4
            SendSpec("t", b"b", NOW, message_id="once", options=SendOptions(max_attempts=1)),
            SendSpec("t", b"c", NOW, message_id="twice", options=SendOptions(max_attempts=2)),
            SendSpec("t", b"d", NOW, message_id="free", options=SendOptions(max_attempts=0)),
        ]
    )
    subscriber = hub.subscribe("t", 100)
    assert deliver(hub, subscriber, 4) == {"plain": 1, "once": 1, "twice": 1, "free": 1}

    # 1. A nack of all four: "once" is out of attempts.
    assert hub.nack("t", ["plain", "once", "twice", "free"], "bad") == (4, 1)
    assert engine.topic_of("once") == "t.dlq"
    assert deliver(hub, subscriber, 3) == {"plain": 2, "twice": 2, "free": 2}

    # 2. The stream ends with three in flight: "twice" is out of attempts.
    hub.release(subscriber)
    assert engine.topic_of("twice") == "t.dlq"
    subscriber = hub.subscribe("t", 100)
    assert deliver(hub, subscriber, 2) == {"plain": 3, "free": 3}

    # 3. Ack timeouts, twice: "plain" reaches the server's limit of 4, "free" has none.
    for attempt in (4, 5):
        clock.ms += 30_001
        got = deliver(hub, subscriber, 2 if attempt == 4 else 1)
        assert got == ({"plain": 4, "free": 4} if attempt == 4 else {"free": 5})
    assert engine.topic_of("plain") == "t.dlq"
    assert engine.topic_of("free") == "t"

    assert len(failures) == 4 + 3 + 2 + 2  # every failed attempt went through fail()
    assert failures == [0] * len(failures)  # and none of them made a call
    # The limits came with the fetches: one call for the three messages that set their own.
    made = [m for methods in calls.by_thread.values() for m in methods]
    assert made.count("delivery_options_of") == 1
    assert "max_attempts" not in made


TOPIC_TABLE = (
    TopicSettings("t", max_attempts=2, backoff="fixed", initial_ms=500, jitter_percent=0),
)


@pytest.mark.parametrize("delivery_process", [{"topics": TOPIC_TABLE}], indirect=True)
def test_a_topic_s_limit_and_backoff_come_with_the_fetch_too(delivery_process):
    """The topic's table is the delivery process's own setting: its failed attempts
    make no call either, and a send's own limit still wins over the topic's."""
    engine, hub, calls, clock, failures = delivery_process
    engine.send_batch(
        [
            SendSpec("t", b"a", NOW, message_id="plain"),  # the topic's limit: 2
            SendSpec("t", b"b", NOW, message_id="three", options=SendOptions(max_attempts=3)),
        ]
    )
    subscriber = hub.subscribe("t", 100)
    assert deliver(hub, subscriber, 2) == {"plain": 1, "three": 1}
    for attempt in (2, 3):
        clock.ms += 30_001  # the ack timeout: failed, then the topic's fixed 500ms
        assert hub.next_batch(subscriber, 0) == []  # backing off
        clock.ms += 500
        want = {"plain": 2, "three": 2} if attempt == 2 else {"three": 3}
        assert deliver(hub, subscriber, len(want)) == want
    assert engine.topic_of("plain") == "t.dlq"  # after the topic's 2 attempts
    assert engine.topic_of("three") == "t"
    assert failures == [0] * 4
    made = [m for methods in calls.by_thread.values() for m in methods]
    assert made.count("delivery_options_of") == 1 and "max_attempts" not in made
