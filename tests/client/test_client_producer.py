"""timerwheel's batching producer end to end over real gRPC: single sends from many threads
arrive as few SendBatch calls (counted by the server), each future gets its own answer."""

from __future__ import annotations

import concurrent.futures
import threading

import grpc
import pytest
from helpers.waits import WAIT_S

import timerwheel
from timerwheel.common import State
from timerwheel.server.service import TimerService


@pytest.fixture
def counted(make_server, monkeypatch):
    """A server whose TimerService records the size of every SendBatch and Send it serves."""
    calls: dict[str, list[int]] = {"SendBatch": [], "Send": []}
    lock = threading.Lock()
    send_batch, send = TimerService.SendBatch, TimerService.Send

    def counting_batch(self, request, context):
        with lock:
            calls["SendBatch"].append(len(request.messages))
        return send_batch(self, request, context)

    def counting_send(self, request, context):
        with lock:
            calls["Send"].append(1)
        return send(self, request, context)

    monkeypatch.setattr(TimerService, "SendBatch", counting_batch)
    monkeypatch.setattr(TimerService, "Send", counting_send)
    server = make_server()
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as client:
        yield client, calls


def test_16_threads_of_single_sends_arrive_as_batches(counted):
    client, calls = counted
    threads, per_thread = 16, 100
    results: list[timerwheel.SendResult] = []
    lock = threading.Lock()
    with client.producer(linger_ms=5, max_batch=500) as producer:

        def produce(index: int) -> None:
            for i in range(per_thread):  # one message at a time, waiting for each answer
                result = producer.send("tdmq", f"t{index}-{i}", delay_ms="1h").result(WAIT_S)
                with lock:
                    results.append(result)

        workers = [threading.Thread(target=produce, args=(i,)) for i in range(threads)]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join(WAIT_S * 3)
    sends = threads * per_thread
    assert len({r.message_id for r in results}) == sends
    assert sum(calls["SendBatch"]) == sends and calls["Send"] == []
    # 1,600 sends in far fewer calls: with 16 senders each waiting, a batch holds several.
    assert len(calls["SendBatch"]) <= sends / 4, calls["SendBatch"]
    assert producer.batches_sent == len(calls["SendBatch"])
    assert client.get(results[0].message_id).state is State.SCHEDULED


def test_one_bad_message_fails_only_its_own_future(counted):
    client, calls = counted
    client.send("orders", b"taken", delay_ms="1h", message_id="dup-1")
    with client.producer(linger_ms=10_000, max_batch=4) as producer:  # goes out when full
        good = producer.send("orders", b"ok", delay_ms="1h")
        bad_topic = producer.send("", b"no topic", delay_ms="1h")
        taken = producer.send("orders", b"other body", delay_ms="1h", message_id="dup-1")
        good2 = producer.send("orders", b"ok2", delay_ms=5_000)
        done, _ = concurrent.futures.wait([good, bad_topic, taken, good2], timeout=WAIT_S)
    assert len(done) == 4
    assert calls["SendBatch"] == [4]  # refused as a whole (atomic), then one by one
    assert len(calls["Send"]) == 1 + 4  # the setup send, then each message alone
    assert client.get(good.result().message_id).body == b"ok"
    assert client.get(good2.result().message_id).body == b"ok2"
    assert bad_topic.exception().code == grpc.StatusCode.INVALID_ARGUMENT
    assert "topic" in bad_topic.exception().details
    assert taken.exception().code == grpc.StatusCode.ALREADY_EXISTS


def test_a_retry_of_a_stored_id_says_it_existed_and_in_which_state(counted):
    client, _ = counted
    first = client.send("orders", b"x", delay_ms="1h", message_id="again-1")
    assert (first.existed, first.existing_state) == (False, State.UNSPECIFIED)
    client.cancel("again-1")
    with client.producer() as producer:
        again = producer.send("orders", b"x", delay_ms="1h", message_id="again-1").result(WAIT_S)
    assert again.existed and again.existing_state is State.CANCELLED
    assert again.message_id == "again-1"


def test_close_sends_what_waits_and_refuses_later_sends(counted):
    client, calls = counted
    producer = client.producer(linger_ms=60_000, max_batch=1000)  # would linger a minute
    futures = [producer.send("c", f"m{i}", delay_ms="1h") for i in range(10)]
    assert producer.close(timeout_s=WAIT_S)
    assert all(f.done() and f.exception() is None for f in futures)
    assert calls["SendBatch"] == [10]
    with pytest.raises(RuntimeError, match="closed"):
        producer.send("c", b"late", delay_ms="1h")


def test_flush_waits_for_earlier_sends(counted):
    client, _ = counted
    with client.producer(linger_ms=60_000) as producer:
        futures = [producer.send("f", f"m{i}", delay_ms="1h") for i in range(5)]
        assert producer.flush(timeout_s=WAIT_S)
        assert all(f.done() for f in futures)


def test_bad_arguments_raise_at_send_and_a_dead_server_fails_every_future():
    with timerwheel.Client("127.0.0.1:1", timeout_s=5) as client, client.producer() as producer:
        with pytest.raises(ValueError, match="delay_ms='soon'"):
            producer.send("t", b"x", delay_ms="soon")
        futures = [producer.send("t", b"x", delay_ms="1s") for _ in range(3)]
        done, _ = concurrent.futures.wait(futures, timeout=WAIT_S)
    assert len(done) == 3
    assert {f.exception().code for f in futures} == {grpc.StatusCode.UNAVAILABLE}
