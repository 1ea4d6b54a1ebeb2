"""Per-call gRPC metrics, build info and the standard process collectors on /metrics.

Every call is counted by method and final status code (`grpc_server_handled_total`, the
grpc-ecosystem names) and timed (`grpc_server_handling_seconds`), refusals included with
their codes; the process serving /metrics exposes prometheus_client's `process_*` and
`python_*` families and `timerwheel_build_info{version} 1`.
"""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.metrics_scenario import scrape, value
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.observability.metrics_http import version
from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.wallclock

SERVICE = "timerwheel.v1.TimerService"


def handled(samples, method: str, code: str, kind: str = "unary") -> float:
    return value(
        samples, "grpc_server_handled_total", grpc_service=SERVICE, grpc_method=method,
        grpc_type=kind, grpc_code=code,
    )  # fmt: skip


def timed(samples, method: str, kind: str = "unary") -> float:
    return value(
        samples, "grpc_server_handling_seconds_count", grpc_service=SERVICE,
        grpc_method=method, grpc_type=kind,
    )  # fmt: skip


def test_calls_are_counted_and_timed_by_method_and_code(make_server):
    server = make_server(metrics_port=0)
    port = server.metrics.port
    before = scrape(port)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        sent = client.send("rpc", b"x", delay_ms=60_000).message_id
        client.get(sent)
        refused = status_of(lambda: client.send("", b"no topic", delay_ms=0))
        assert refused.code is grpc.StatusCode.INVALID_ARGUMENT
        missing = status_of(lambda: client.get("0" * 26))
    after = scrape(port)

    def moved(function, *args) -> float:
        return function(after, *args) - function(before, *args)

    assert moved(handled, "Send", "OK") == 1
    assert moved(handled, "Send", "INVALID_ARGUMENT") == 1
    assert moved(handled, "Get", "OK") == 1
    assert moved(handled, "Get", missing.code.name) == 1
    assert moved(timed, "Send") == 2 and moved(timed, "Get") == 2
    started = value(
        after, "grpc_server_started_total", grpc_service=SERVICE, grpc_method="Send",
        grpc_type="unary",
    )  # fmt: skip
    assert started >= 2
    seconds = value(
        after, "grpc_server_handling_seconds_sum", grpc_service=SERVICE, grpc_method="Send",
        grpc_type="unary",
    )  # fmt: skip
    assert seconds > 0


def test_a_guard_refusal_and_a_stream_are_counted(make_server):
    """An undecodable request, refused by the guard before the servicer sees it, is counted
    with its code; a Subscribe stream is counted (as a server stream) when it ends."""
    server = make_server(metrics_port=0)
    port = server.metrics.port
    before = scrape(port)
    with grpc.insecure_channel(server.target) as channel:
        raw_send = channel.unary_unary(f"/{SERVICE}/Send")
        with pytest.raises(grpc.RpcError) as bad:
            raw_send(b"\x0a\x02\xff\xfe", timeout=WAIT_S)  # topic: not UTF-8
        assert bad.value.code() is grpc.StatusCode.INVALID_ARGUMENT
        subscribe = channel.unary_stream(
            f"/{SERVICE}/Subscribe",
            request_serializer=pb.SubscribeRequest.SerializeToString,
            response_deserializer=pb.DeliveryBatch.FromString,
        )
        stream = subscribe(pb.SubscribeRequest(topic="rpc"), timeout=0.5)
        with pytest.raises(grpc.RpcError):
            list(stream)
    after = scrape(port)
    assert handled(after, "Send", "INVALID_ARGUMENT") - handled(
        before, "Send", "INVALID_ARGUMENT"
    ) == 1  # fmt: skip

    def ended(samples) -> float:
        return sum(
            v for (name, labels), v in samples.items()
            if name == "grpc_server_handled_total"
            and ("grpc_method", "Subscribe") in labels and ("grpc_type", "server_stream") in labels
        )  # fmt: skip

    deadline_passed = after
    for _ in range(100):  # the server sees the deadline pass a moment after the client
        if ended(deadline_passed) > ended(before):
            break
        deadline_passed = scrape(port)
    assert ended(deadline_passed) - ended(before) == 1


def test_process_python_and_build_info_families_are_exposed(make_server):
    server = make_server(metrics_port=0)
    samples = scrape(server.metrics.port)
    names = {name for name, _ in samples}
    for family in (
        "process_cpu_seconds_total", "process_resident_memory_bytes", "process_open_fds",
        "process_start_time_seconds", "python_info", "python_gc_collections_total",
    ):  # fmt: skip
        assert family in names, family
    assert value(samples, "timerwheel_build_info", version=version()) == 1
    assert version() != "unknown"  # the tests run against the installed package
