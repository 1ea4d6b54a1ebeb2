"""timerwheel.procs.remote_hub: a worker's Subscribe stream reading from the delivery process, over
a real unix socket to a real `DeliveryHost` (its hub on real RocksDB, in virtual time).
The stream asks for its next batch before it hands this one on, so the delivery process
picks one while the worker sends the other; a stream that ends with a batch read ahead
gives it back to the topic."""

from __future__ import annotations

import secrets
import threading

import pytest
from helpers.waits import WAIT_S

from timerwheel.delivery.hub import DeliveryHub
from timerwheel.engine.engine import Engine
from timerwheel.procs.delivery_host import DeliveryHost
from timerwheel.procs.engine_host import EngineHost
from timerwheel.procs.ipc import CallClient, CallServer
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.procs.remote_hub import RemoteHub
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings


class CountedHost:
    """A DeliveryHost whose answered `next_batch` calls the test can wait for."""

    def __init__(self, hub: DeliveryHub) -> None:
        self._host = DeliveryHost(hub)
        self._cond = threading.Condition()
        self.batches_taken = 0
        self.fail_from = 0  # > 0: the n-th next_batch and later fail, as a bug would

    def handle(self, method, args, context):
        failing = method == "next_batch" and 0 < self.fail_from <= self.batches_taken + 1
        answer = None if failing else self._host.handle(method, args, context)
        if method == "next_batch":
            with self._cond:
                self.batches_taken += 1
                self._cond.notify_all()
        if failing:
            raise RuntimeError("injected")
        return answer

    def wait_taken(self, count: int) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self.batches_taken >= count, WAIT_S)


@pytest.fixture
def served(tmp_path):
    """(the hub, the host's counter, a worker's RemoteHub of it): processes as in
    `serve --workers N`, here threads of this one, each side over its own unix socket."""
    clock = VirtualClock()
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False, delivery_batch_max=2)
    engine = Engine(settings, clock, background=False)
    engine_host = EngineHost(engine)
    authkey = secrets.token_bytes(32)
    engine_path, delivery_path = str(tmp_path / "engine.sock"), str(tmp_path / "delivery.sock")
    engine_server = CallServer(engine_path, authkey, engine_host.handle, "engine")
    remote_engine = RemoteEngine(settings, CallClient(engine_path, authkey, "engine"), clock)
    hub = DeliveryHub(remote_engine, settings, clock.now_ms, background=False)
    host = CountedHost(hub)
    delivery_server = CallServer(delivery_path, authkey, host.handle, "delivery")
    remote = RemoteHub(delivery_path, authkey)
    try:
        yield engine, hub, host, remote
    finally:
        remote.close()
        remote.disconnect()
        delivery_server.close()
        hub.close()
        remote_engine.close()
        engine_server.close()
        engine_host.close()
        engine.close()


def fire(engine: Engine, count: int) -> list[str]:
    specs = [SendSpec("jobs", b"x", When(WhenKind.DELAY, 0)) for _ in range(count)]
    return [result.message_id for result in engine.send_batch(specs)]


def ids(rows) -> list[str]:
    return [message_id for _, message_id, _, _ in rows]


def stream_reading_ahead(engine, host, remote, count: int):
    """`count` messages fired and a stream of them that has handed on its first batch:
    (the ids sent, its subscriber, its batches), the next batch already taken for it."""
    sent = fire(engine, count)
    subscriber = remote.subscribe("jobs", 10)
    batches = remote.batches(subscriber)
    assert ids(next(batches)) == sent[:2]
    # The stream has not asked for more, yet the delivery process took the next batch.
    assert host.wait_taken(2), "the next batch was not read ahead"
    return sent, subscriber, batches


def test_the_next_batch_is_taken_while_the_stream_still_holds_this_one(served):
    engine, _, host, remote = served
    sent, subscriber, batches = stream_reading_ahead(engine, host, remote, 6)
    assert ids(next(batches)) == sent[2:4]
    assert ids(next(batches)) == sent[4:]
    batches.close()
    remote.release(subscriber)


def test_a_stream_that_ends_with_a_batch_read_ahead_gives_it_back(served):
    engine, hub, host, remote = served
    sent, first, batches = stream_reading_ahead(engine, host, remote, 4)  # sent[2:] ahead
    batches.close()  # the stream ends as the service ends it: then it is released
    remote.release(first)

    second = remote.subscribe("jobs", 10)
    again = remote.batches(second)
    redelivered = next(again) + next(again)
    assert sorted(ids(redelivered)) == sorted(sent)  # all four, the read-ahead ones too
    assert {attempt for _, _, _, attempt in redelivered} == {2}
    again.close()
    remote.release(second)
    assert hub.unacked() == 4  # given back, not lost or acked


def test_a_read_ahead_that_fails_does_not_keep_the_stream_from_ending(served):
    engine, _, host, remote = served
    sent = fire(engine, 4)
    host.fail_from = 2
    subscriber = remote.subscribe("jobs", 10)
    batches = remote.batches(subscriber)
    assert ids(next(batches)) == sent[:2]
    assert host.wait_taken(2)  # the read ahead has failed in the delivery process
    batches.close()  # the failure is not raised out of the stream's end
    remote.release(subscriber)
    assert remote.subscriber_count() == 0


def test_a_release_crosses_to_the_delivery_process_and_ends_the_stream(served):
    engine, _, _, remote = served
    sent = fire(engine, 2)
    stopping = remote.subscribe("jobs", 10)
    batches = remote.batches(stopping)
    assert ids(next(batches)) == sent
    # Given back unstarted: no attempt counted, and the stream, holding none, ends.
    assert remote.nack("jobs", sent, release=True) == (2, 0)
    assert next(batches, None) is None
    remote.release(stopping)

    second = remote.subscribe("jobs", 10)
    again = remote.batches(second)
    rows = next(again)
    assert ids(rows) == sent and {attempt for _, _, _, attempt in rows} == {1}
    again.close()
    remote.release(second)
