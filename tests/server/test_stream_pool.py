"""timerwheel.server.stream_pool: unary calls run on `grpc_workers` threads, streams on a pool of
their own, in a real server over real gRPC on loopback (the server runs in this process, so its
threads are this process's and are counted by name)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.server.stream_pool import PROBE_REQUEST_BYTES
from timerwheel.v1 import timerwheel_pb2 as pb

MIB = 1024 * 1024


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


def test_a_probe_request_above_its_size_is_refused_undecoded_and_small_ones_answer(server):
    """Health and reflection are open to callers without a token; their requests are a
    few bytes, and one of megabytes is refused naming its size and the limit."""
    with grpc.insecure_channel(server.target) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        with pytest.raises(grpc.RpcError) as refused:
            health.Check(health_pb2.HealthCheckRequest(service="s" * MIB), timeout=WAIT_S)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        details = refused.value.details()
        assert "Health.Check: a request of 1048580 bytes" in details
        assert f"at most {PROBE_REQUEST_BYTES} bytes" in details
        watch = health.Watch(health_pb2.HealthCheckRequest(service="w" * MIB), timeout=WAIT_S)
        with pytest.raises(grpc.RpcError) as refused:
            next(watch)
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "Health.Watch: a request of" in refused.value.details()
        answer = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=WAIT_S)
        assert answer.status == health_pb2.HealthCheckResponse.SERVING
        reflection = reflection_pb2_grpc.ServerReflectionStub(channel)
        asked = reflection_pb2.ServerReflectionRequest(list_services="")
        [listed] = list(reflection.ServerReflectionInfo(iter([asked]), timeout=WAIT_S))
        assert "timerwheel.v1.TimerService" in {
            s.name for s in listed.list_services_response.service
        }
        big = reflection_pb2.ServerReflectionRequest(file_by_filename="f" * MIB)
        with pytest.raises(grpc.RpcError) as refused:
            list(reflection.ServerReflectionInfo(iter([big]), timeout=WAIT_S))
        assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        assert "reflection: a request of" in refused.value.details()
