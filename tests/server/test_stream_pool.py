"""timerwheel.server.stream_pool: unary calls run on `grpc_workers` threads, streams on a pool of
their own, in a real server over real gRPC on loopback (the server runs in this process, so its
threads are this process's and are counted by name)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.v1 import timerwheel_pb2 as pb


def threads_named(prefix: str) -> int:
    return sum(thread.name.startswith(prefix) for thread in threading.enumerate())


def test_forty_concurrent_sends_all_answer_on_no_more_than_grpc_workers_threads(make_server):
    before = threads_named("grpc-unary")  # other tests' servers' threads, if still ending
    server = make_server(grpc_workers=2, max_subscribers=4)
    with TimerClient(server.target, timeout_s=WAIT_S) as client, ThreadPoolExecutor(40) as senders:
        futures = [
            senders.submit(client.service.Send, pb.SendRequest(topic="t", delay_ms=60_000))
            for _ in range(40)
        ]
        ids = {future.result(WAIT_S).message_id for future in futures}
    assert len(ids) == 40
    assert server.engine.count("t", 0, 0)[0] == 40
    assert 1 <= threads_named("grpc-unary") - before <= 2


def test_a_stopped_server_ends_its_pools_threads(make_server):
    server = make_server(grpc_workers=2, max_subscribers=4)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        client.service.Send(pb.SendRequest(topic="t", delay_ms=60_000))
        client.ack("t", ["no-such-id"])  # a thread of the settle pool too
    pools = ("grpc-unary", "grpc-stream", "grpc-settle")
    ours = [t for t in threading.enumerate() if t.name.startswith(pools)]
    assert {t.name.split("_")[0] for t in ours} >= {"grpc-unary", "grpc-settle"}
    server.stop(grace_s=1.0)
    for thread in ours:
        thread.join(WAIT_S)
    assert not any(thread.is_alive() for thread in ours)


def test_open_subscribe_streams_hold_stream_threads_and_unary_calls_still_answer(make_server):
    server = make_server(grpc_workers=1, max_subscribers=4)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        streams = [
            client.service.Subscribe(pb.SubscribeRequest(topic=f"s{i}", max_in_flight=10))
            for i in range(3)
        ]
        try:
            for i, stream in enumerate(streams):  # a delivery: the stream's handler runs
                client.service.Send(pb.SendRequest(topic=f"s{i}", body=b"x", delay_ms=0))
                batch = next(stream)
                assert [d.topic for d in batch.deliveries] == [f"s{i}"]
            assert threads_named("grpc-stream") >= 3
            answer = client.service.Send(pb.SendRequest(topic="t", delay_ms=60_000), timeout=5)
            assert answer.message_id
        finally:
            for stream in streams:
                stream.cancel()
