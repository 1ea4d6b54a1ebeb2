"""The cap on the calls one caller may have waiting for a thread of the fair pools
(`max_queued_calls_per_caller`, timerwheel.security.fair_pool): alone, and over gRPC,
where a token's flood is refused at once and another token is still served."""

from __future__ import annotations

import re
import threading
import time

import grpc
import pytest
from helpers.credentials import write_tokens
from helpers.metrics_scenario import poll, scrape, value
from helpers.waits import WAIT_S

from timerwheel.cli.main import main
from timerwheel.client import TimerClient
from timerwheel.security.fair_pool import FairPool, fair_pool
from timerwheel.security.settings import SecuritySettings
from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.settings import SettingsError


def by_first_arg(_fn, args) -> str:
    return args[0]


def test_a_caller_over_its_share_and_its_queue_is_refused_and_others_are_not():
    pool = FairPool(workers=3, per_key=2, thread_name_prefix="t", key_of=by_first_arg,
                    max_queued=2)  # fmt: skip
    release = threading.Event()
    started = threading.Semaphore(0)

    def task(key: str) -> str:
        started.release()
        assert release.wait(WAIT_S)
        return key

    try:
        taken = [pool.submit(task, "a") for _ in range(4)]  # 2 running, 2 waiting
        for _ in range(2):
            assert started.acquire(timeout=WAIT_S)
        assert pool.running("a") == 2 and pool.queued("a") == 2
        refused = [pool.submit(task, "a") for _ in range(3)]
        for future in refused:  # failed at once, not queued
            with pytest.raises(Overloaded) as caught:
                future.result(0)
            message = str(caught.value)
            assert "max_queued_calls_per_caller=2" in message and "a already has" in message
            assert "2 calls running and 2 waiting" in message
            assert "share of 2 threads" in message
        assert pool.running("a") == 2 and pool.queued("a") == 2
        other = [pool.submit(task, "b") for _ in range(4)]  # b's own share and queue
        assert all(not future.done() for future in taken + other)
        assert pool.queued("b") + pool.running("b") == 4
        assert started.acquire(timeout=WAIT_S)  # b's first, on the third thread
        release.set()
        assert [f.result(WAIT_S) for f in taken] == ["a"] * 4
        assert [f.result(WAIT_S) for f in other] == ["b"] * 4
        assert pool.submit(task, "a").result(WAIT_S) == "a"  # room again once they ended
    finally:
        release.set()
        pool.shutdown()


def test_without_a_cap_nothing_is_refused():
    pool = FairPool(workers=1, per_key=1, thread_name_prefix="t", key_of=by_first_arg)
    gate = threading.Event()
    started = threading.Event()

    def task(_key: str) -> bool:
        started.set()
        return gate.wait(WAIT_S)

    try:
        futures = [pool.submit(task, "a") for _ in range(200)]
        assert started.wait(WAIT_S)  # the one thread took the first: the rest wait
        assert pool.running("a") == 1 and pool.queued("a") == 199
        gate.set()
        assert all(f.result(WAIT_S) for f in futures)
    finally:
        gate.set()
        pool.shutdown()


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8"])
def test_the_cap_is_a_validated_setting(bad):
    assert SecuritySettings().max_queued_calls_per_caller == 64
    assert fair_pool(32, 75, "t", 64).max_queued == 64
    with pytest.raises(SettingsError, match=f"max_queued_calls_per_caller={bad!r}"):
        SecuritySettings(max_queued_calls_per_caller=bad)


def test_serve_refuses_a_bad_cap_flag_with_exit_2(tmp_path, capsys):
    data_dir = tmp_path / "data"
    capsys.readouterr()
    code = main(["serve", "--data-dir", str(data_dir), "--port", "0",
                 "--max-queued-calls-per-caller", "0"])  # fmt: skip
    assert code == 2 and "max_queued_calls_per_caller=0" in capsys.readouterr().err
    assert not data_dir.exists()


SEND = "/timerwheel.v1.TimerService/Send"


def stalled_send(channel: grpc.Channel, token: str | None, release: threading.Event):
    """A Send whose request never comes (headers only) until `release`: it holds a thread
    of the unary pool (reading, or waiting for a place to read), or waits for one."""

    def never():
        release.wait(WAIT_S * 6)
        return
        yield

    metadata = (("authorization", f"Bearer {token}"),) if token else None
    return channel.stream_unary(SEND).future(never(), metadata=metadata, timeout=WAIT_S * 6)


def wait_done(futures, count: int) -> list:
    """The calls done once `count` of them are (those done at the deadline else)."""
    deadline = time.monotonic() + WAIT_S
    while len(done := [f for f in futures if f.done()]) < count and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the calls' state with a deadline
    return done


@pytest.mark.parametrize("tokens", [True, False], ids=["per token", "per connection"])
def test_a_flood_beyond_the_cap_is_refused_and_another_caller_is_served(
    make_server, tmp_path, tokens
):
    """Four unary threads, three a caller, two waiting at most: of ten stalled Sends of one
    token (or connection), three hold threads, two wait, and five are refused at once
    RESOURCE_EXHAUSTED naming the cap and the counts, while the stalled ones go on. Another
    token (connection) then has five Sends in at once, its own share and queue on the one
    thread left, and every one is served."""
    names = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(
        auth_tokens_file=str(tmp_path / "tokens.toml") if tokens else "",
        max_queued_calls_per_caller=2,
    )
    server = make_server(
        security=security, grpc_workers=4, caller_thread_share_percent=75, metrics_port=0
    )

    def refusals(samples) -> float:
        labels = {"method": "Send", "code": "RESOURCE_EXHAUSTED"}
        return value(samples, "timerwheel_refusals_total", **labels)

    before = refusals(scrape(server.metrics.port))  # the metrics are the process's
    channel = grpc.insecure_channel(server.target, [("grpc.use_local_subchannel_pool", 1)])
    release = threading.Event()
    flood = [stalled_send(channel, names["producer"] if tokens else None, release)
             for _ in range(10)]  # fmt: skip
    other = TimerClient(server.target, timeout_s=WAIT_S, token=names["admin"] if tokens else None)
    try:
        refused = wait_done(flood, 5)
        assert len(refused) == 5, [f.done() for f in flood]
        for call in refused:
            assert call.code() is grpc.StatusCode.RESOURCE_EXHAUSTED
            details = call.details()
            assert details.startswith("TimerService.Send: ")
            assert "max_queued_calls_per_caller=2" in details, details
            # 3 running and 2 waiting, once the pool's threads have taken theirs
            counts = re.search(r"has (\d+) calls running and (\d+) waiting", details)
            assert counts and int(counts[1]) + int(counts[2]) == 5, details
            assert "beyond its share of 3 threads" in details, details
            assert ("token 'producer'" if tokens else "peer ipv4:127.0.0.1:") in details
        samples = poll(server.metrics.port, lambda s: refusals(s) >= before + 5)
        assert refusals(samples) == before + 5  # each refusal counted once
        ids = [f"other-{i}" for i in range(5)]
        sends = [
            other.service.Send.future(
                other.request("jobs", b"served", delay_ms=60_000, message_id=i),
                timeout=WAIT_S,
            )
            for i in ids
        ]  # fmt: skip
        assert [send.result().message_id for send in sends] == ids
        assert [other.get(i).body for i in ids] == [b"served"] * 5
        assert sum(not call.done() for call in flood) == 5  # still stalled beside them
    finally:
        release.set()
        for call in flood:
            call.cancel()
        other.close()
        channel.close()
