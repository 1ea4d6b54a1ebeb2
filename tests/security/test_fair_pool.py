"""The fair pool (timerwheel.security.fair_pool) alone, and over gRPC: one caller's many
waiting calls leave threads, and turns, to the others."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.security.fair_pool import FairPool, fair_pool
from timerwheel.security.settings import SecuritySettings
from timerwheel.wheels.settings import Settings, SettingsError


def by_first_arg(_fn, args) -> str:
    return args[0]


class Blocker:
    """Tasks that wait for their release; each says it has started."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.cond = threading.Condition()
        self.release = threading.Event()

    def task(self, key: str, name: str) -> str:
        with self.cond:
            self.started.append(name)
            self.cond.notify_all()
        assert self.release.wait(WAIT_S)
        return name

    def wait_started(self, count: int) -> list[str]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.started) >= count, WAIT_S), self.started
            return list(self.started)


def test_a_caller_holds_at_most_its_share_and_the_rest_run_for_others():
    pool = FairPool(workers=4, per_key=3, thread_name_prefix="t", key_of=by_first_arg)
    blocker = Blocker()
    try:
        futures = [pool.submit(blocker.task, "a", f"a{i}") for i in range(10)]
        assert blocker.wait_started(3) == ["a0", "a1", "a2"]
        assert pool.running("a") == 3 and pool.queued("a") == 7  # waiting, no thread held
        other = pool.submit(blocker.task, "b", "b0")
        assert blocker.wait_started(4)[3] == "b0"  # the fourth thread was free for b
        assert isinstance(pool, ThreadPoolExecutor)  # grpcio takes only those
        blocker.release.set()
        assert [f.result(WAIT_S) for f in futures] == [f"a{i}" for i in range(10)]
        assert other.result(WAIT_S) == "b0"
    finally:
        blocker.release.set()
        pool.shutdown()


def test_callers_take_freed_threads_in_turn_not_in_order_of_arrival():
    pool = FairPool(workers=1, per_key=1, thread_name_prefix="t", key_of=by_first_arg)
    order: list[str] = []
    gate = threading.Event()
    try:
        first = pool.submit(lambda key: gate.wait(WAIT_S), "a")  # holds the only thread
        futures = [pool.submit(order.append, "a") for _ in range(3)]
        futures += [pool.submit(order.append, "b") for _ in range(2)]
        gate.set()
        first.result(WAIT_S)
        for future in futures:
            future.result(WAIT_S)
        # a had the thread first, so b's turn is next; FIFO would have been a, a, a, b, b
        assert order == ["b", "a", "b", "a", "a"]
    finally:
        pool.shutdown()


def test_a_failing_task_fails_its_future_and_frees_its_thread():
    pool = FairPool(workers=1, per_key=1, thread_name_prefix="t", key_of=by_first_arg)
    try:
        failing = pool.submit(lambda key: 1 / 0, "a")
        with pytest.raises(ZeroDivisionError):
            failing.result(WAIT_S)
        assert pool.submit(lambda key: key, "a").result(WAIT_S) == "a"
        assert pool.running("a") == 0
    finally:
        pool.shutdown()


def test_shutdown_runs_what_is_queued_or_cancels_it_and_refuses_new_tasks():
    pool = FairPool(workers=1, per_key=1, thread_name_prefix="t", key_of=by_first_arg)
    gate = threading.Event()
    first = pool.submit(lambda key: gate.wait(WAIT_S), "a")
    queued = pool.submit(lambda key: "ran", "b")
    gate.set()
    pool.shutdown(wait=True)
    assert first.result(0) is True and queued.result(0) == "ran"
    with pytest.raises(RuntimeError):
        pool.submit(lambda key: None, "a")
    other = FairPool(workers=1, per_key=1, thread_name_prefix="t", key_of=by_first_arg)
    gate, started = threading.Event(), threading.Event()
    running = other.submit(lambda key: started.set() or gate.wait(WAIT_S), "a")
    assert started.wait(WAIT_S)  # on its thread: not cancelled below
    dropped = other.submit(lambda key: "ran", "a")
    other.shutdown(wait=False, cancel_futures=True)
    gate.set()
    assert running.result(WAIT_S) is True and dropped.cancelled()


def test_the_share_is_a_validated_percentage_of_each_pool():
    assert fair_pool(32, 75, "t").per_key == 24 and fair_pool(8, 75, "t").per_key == 6
    assert fair_pool(2, 10, "t").per_key == 1  # one thread at least
    for bad in (0, 101, 7.5):
        with pytest.raises(SettingsError, match=f"caller_thread_share_percent={bad!r}"):
            Settings(caller_thread_share_percent=bad)


SEND = "/timerwheel.v1.TimerService/Send"


def stalled_send(channel: grpc.Channel, token: str | None, release: threading.Event):
    """A Send whose request never comes (headers only) until `release`: it holds a place of
    the receive gate, or waits for one, on a thread of the unary pool."""

    def never():
        release.wait(WAIT_S * 6)
        return
        yield

    metadata = (("authorization", f"Bearer {token}"),) if token else None
    return channel.stream_unary(SEND).future(never(), metadata=metadata, timeout=WAIT_S * 6)


@pytest.mark.parametrize("tokens", [True, False], ids=["per token", "per connection"])
def test_one_callers_stalled_calls_leave_threads_for_another_caller(make_server, tmp_path, tokens):
    """Four unary threads, three a caller: one token (or, without tokens, one connection)
    with eight stalled Sends holds three threads (reading, or waiting for a place to read)
    and its other calls wait without one, so another token's (connection's) Send is served
    at once. With one first-come queue of calls it waited for the stalled ones to end."""
    names = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml")) if tokens else None
    server = make_server(security=security, grpc_workers=4, caller_thread_share_percent=75)
    channel = grpc.insecure_channel(server.target, [("grpc.use_local_subchannel_pool", 1)])
    release = threading.Event()
    stalls = [
        stalled_send(channel, names["producer"] if tokens else None, release) for _ in range(8)
    ]
    other = TimerClient(server.target, timeout_s=WAIT_S, token=names["admin"] if tokens else None)
    try:
        result = other.send("jobs", b"served", delay_ms=60_000, message_id="other-caller")
        assert result.message_id == "other-caller"
        assert other.get("other-caller").body == b"served"
        assert not any(stall.done() for stall in stalls)  # still stalled: served beside them
    finally:
        release.set()
        for stall in stalls:
            stall.cancel()
        other.close()
        channel.close()
