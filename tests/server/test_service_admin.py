"""Health, reflection and TimerAdmin (Stats, Topics, Export) over real gRPC."""

from __future__ import annotations

import json
import os
import shutil
import time

import grpc
import pytest
from google.protobuf import descriptor_pb2
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha import reflection_pb2
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.time_of_day import wall_ms
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.observability import thread_cpu
from timerwheel.security.settings import SecuritySettings
from timerwheel.server.app import TimerServer
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import Settings

pytestmark = pytest.mark.wallclock


def test_health_answers_serving(client):
    assert client.health_status() == "SERVING"
    assert client.health_status("timerwheel.v1.TimerService") == "SERVING"
    assert client.health_status("timerwheel.v1.TimerAdmin") == "SERVING"
    assert status_of(lambda: client.health_status("no.such.Service")).code == (
        grpc.StatusCode.NOT_FOUND
    )


def test_reflection_lists_and_describes_the_api(client):
    database = ProtoReflectionDescriptorDatabase(client.channel)
    services = set(database.get_services())
    assert {"timerwheel.v1.TimerService", "timerwheel.v1.TimerAdmin"} <= services
    assert "grpc.health.v1.Health" in services

    pool = DescriptorPool(database)
    service = pool.FindServiceByName("timerwheel.v1.TimerService")
    assert {m.name for m in service.methods} >= {
        "Send", "SendBatch", "Cancel", "Get", "List", "Subscribe", "Ack", "Nack", "Reschedule",
    }  # fmt: skip
    send = pool.FindMessageTypeByName("timerwheel.v1.SendRequest")
    assert send.fields_by_name["delay_level"].number == 7
    assert send.oneofs_by_name["when"].fields[0].name == "deliver_at_ms"


def reflect_v1(channel: grpc.Channel, request: reflection_pb2.ServerReflectionRequest):
    """One request to grpc.reflection.v1 (its messages are v1alpha's on the wire)."""
    info = channel.stream_stream(
        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
        request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
        response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
    )
    (response,) = list(info(iter([request]), timeout=WAIT_S))
    return response


def test_reflection_answers_under_v1_as_well_as_v1alpha(client):
    listed = reflect_v1(client.channel, reflection_pb2.ServerReflectionRequest(list_services=""))
    services = {s.name for s in listed.list_services_response.service}
    assert {"timerwheel.v1.TimerService", "grpc.health.v1.Health"} <= services
    assert {"grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection"} <= services  # fmt: skip

    # Every listed service can be described, v1's own included (grpcurl describe).
    for symbol in ("timerwheel.v1.TimerService", "grpc.reflection.v1.ServerReflection"):
        ask = reflection_pb2.ServerReflectionRequest(file_containing_symbol=symbol)
        answer = reflect_v1(client.channel, ask)
        assert answer.HasField("file_descriptor_response"), answer
        files = [
            descriptor_pb2.FileDescriptorProto.FromString(raw)
            for raw in answer.file_descriptor_response.file_descriptor_proto
        ]
        package = symbol.rsplit(".", 1)[0]
        assert any(f.package == package for f in files)
    v1 = next(f for f in files if f.package == "grpc.reflection.v1")
    (method,) = v1.service[0].method
    assert method.input_type == ".grpc.reflection.v1.ServerReflectionRequest"


def test_stats_reports_process_store_and_backlog(client, collectors):
    before = wall_ms()
    client.send_batch([TimerClient.request("s", b"x" * 1000, delay_ms=60_000) for _ in range(50)])
    fired = client.send("s", b"now", delay_ms=0)
    stats = client.stats()
    assert before - 1_000 <= stats.now_ms <= wall_ms() + 1_000
    assert stats.unacked == 1 and stats.queued_ops == 0
    assert stats.column_family_keys["messages"] >= 1
    assert set(stats.column_family_keys) >= {"messages", "wheel_second", "ready", "meta"}
    assert stats.rss_bytes > 10 * 1024 * 1024 and stats.cpu_seconds > 0
    threads = stats.thread_cpu_seconds  # one process: every thread of the server's
    assert set(threads) == set(thread_cpu.KINDS)
    assert all(seconds >= 0 for seconds in threads.values())
    assert sum(threads.values()) <= stats.cpu_seconds + 0.1
    assert stats.data_dir_bytes > 50 * 1000  # the WAL holds the 50 KB of bodies at least

    collector = Collector(client, "s")
    collectors.append(collector)
    collector.wait_count(1)
    assert collector.ids() == [fired.message_id] and client.stats().unacked == 0


def test_stats_reports_wall_clock_steps_over_grpc(tmp_path):
    """A server on a virtual clock whose wall time is stepped back, then forward: the
    writer (running on its thread) notices each within its idle re-check, and Stats
    says so, with the last step's signed size and the wall time it stepped to."""
    clock = VirtualClock(wall_ms())
    settings = Settings(data_dir=str(tmp_path / "data"), port=0, sync_writes=False)
    server = TimerServer(settings, clock=clock).start()
    try:
        with TimerClient(server.target, timeout_s=WAIT_S) as client:
            stats = client.stats()
            assert (stats.clock_steps_forward, stats.clock_steps_backward) == (0, 0)
            assert (stats.last_clock_step_ms, stats.last_clock_step_at_ms) == (0, 0)
            back_to = clock.step_wall(-10_000)
            stats = _stats_when(client, lambda s: s.clock_steps_backward == 1)
            assert (stats.last_clock_step_ms, stats.last_clock_step_at_ms) == (-10_000, back_to)
            forward_to = clock.step_wall(3_600_000)
            stats = _stats_when(client, lambda s: s.clock_steps_forward == 1)
            assert stats.clock_steps_backward == 1
            assert (stats.last_clock_step_ms, stats.last_clock_step_at_ms) == (
                3_600_000,
                forward_to,
            )
    finally:
        server.stop(grace_s=1.0)


def _stats_when(client: TimerClient, condition):
    deadline = time.monotonic() + WAIT_S
    while not condition(stats := client.stats()):
        assert time.monotonic() < deadline, f"Stats never got there: {stats}"
        time.sleep(0.05)
    return stats


def test_topics_lists_each_backlog_and_follows_fires_and_acks(client, collectors):
    assert client.topics() == []
    client.send_batch([TimerClient.request("later", b"", delay_ms=600_000) for _ in range(3)])
    client.send_batch([TimerClient.request("now", b"", delay_ms=0) for _ in range(2)])
    cancelled = client.send("later", b"", delay_ms=600_000)
    client.cancel(cancelled.message_id)
    backlog = {t.topic: (t.pending, t.fired_unacked) for t in client.topics()}
    assert backlog == {"later": (3, 0), "now": (0, 2)}

    collector = Collector(client, "now")
    collectors.append(collector)
    collector.wait_count(2)
    assert [(t.topic, t.pending, t.fired_unacked) for t in client.topics()] == [("later", 3, 0)]


def test_topics_come_in_bounded_pages_that_together_hold_every_topic(client):
    names = [f"t{i:05d}" for i in range(1_205)]
    for start in range(0, len(names), 500):
        batch = names[start : start + 500]
        client.send_batch([TimerClient.request(n, b"", delay_ms=600_000) for n in batch])

    def pages(limit: int) -> list[list[str]]:
        seen, token = [], ""
        while True:
            page = client.topics_page(limit, token)
            assert page.total == len(names)
            seen.append([t.topic for t in page.topics])
            token = page.next_page_token
            if not token:
                return seen

    default = pages(0)  # the server's default: 1,000
    assert [len(p) for p in default] == [1_000, 205]
    small = pages(100)
    assert all(len(p) <= 100 for p in small) and len(small) == 13
    flat = [[name for page in found for name in page] for found in (small, default)]
    assert flat == [names, names]  # all of them, by name, once
    assert [t.topic for t in client.topics()] == names  # the client reads every page
    # Any name is a place to start: a prefix starts at its first topic.
    assert [t.topic for t in client.topics_page(3, "t0120").topics] == [
        "t01200",
        "t01201",
        "t01202",
    ]
    assert (
        client.topics_page(0, "u").topics == [] and not client.topics_page(0, "u").next_page_token
    )


def test_topics_refuses_a_limit_over_its_max_naming_the_field(client):
    client.send("one", b"", delay_ms=600_000)
    assert len(client.topics_page(10_000).topics) == 1  # the max itself is fine
    for limit in (10_001, -1):
        error = status_of(lambda limit=limit: client.topics_page(limit))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT
        assert error.details.startswith(f"limit={limit}: must be 0..10,000")


def test_stats_fire_lateness_counts_the_fires_of_this_minute(client, collectors):
    assert list(client.stats().fire_lateness) == []
    overdue_ms = 2_000  # sent already due: fired at once, about this late
    client.send_batch(
        [TimerClient.request("late", b"", deliver_at_ms=wall_ms() - overdue_ms) for _ in range(5)]
    )
    collector = Collector(client, "late")
    collectors.append(collector)
    collector.wait_count(5)
    (minute,) = client.stats().fire_lateness
    assert minute.fires == 5
    assert minute.minute_ms % 60_000 == 0 and minute.minute_ms <= wall_ms()
    assert (
        overdue_ms <= minute.p50_ms <= minute.p99_ms <= minute.max_ms < overdue_ms + WAIT_S * 1000
    )


def _exporting_server(make_server, tmp_path, reserve_bytes: int = 0):
    root = tmp_path / "exports"
    root.mkdir(exist_ok=True)
    security = SecuritySettings(export_root=str(root), export_reserve_bytes=reserve_bytes)
    server = make_server(security=security)
    return server, TimerClient(server.target, timeout_s=WAIT_S), root


def test_export_writes_a_cut_below_the_export_root(make_server, tmp_path):
    _, client, root = _exporting_server(make_server, tmp_path)
    with client:
        sent = client.send_batch([TimerClient.request("e", b"x", delay_ms=60_000)] * 30)
        result = client.export("nightly/one")
        out = root / "nightly" / "one"
        assert result.out_dir == str(out) and result.files >= 1 and result.rows >= 2 * len(sent)
        assert abs(result.cut_at_ms - wall_ms()) < WAIT_S * 1000 and result.seconds >= 0
        manifest = json.loads((out / "manifest.json").read_text())
        assert manifest  # the format itself is timerwheel.store.export's to test
        assert any(name.endswith(".sst") for name in os.listdir(out))

        again = status_of(lambda: client.export("nightly/one"))
        assert again.code == grpc.StatusCode.INVALID_ARGUMENT and "new or empty" in again.details
        empty = status_of(lambda: client.export(""))
        assert empty.code == grpc.StatusCode.INVALID_ARGUMENT and "out_dir=''" in empty.details
        rows = status_of(lambda: client.export("other", max_rows_per_file=-1))
        assert rows.code == grpc.StatusCode.INVALID_ARGUMENT
        assert "max_rows_per_file=-1" in rows.details
        assert sorted(os.listdir(root)) == ["nightly"]  # the refusals wrote nothing


def test_export_refusals_are_one_message_that_never_shows_the_root(make_server, tmp_path):
    """Outside the root, a folder not empty, a file, a path below a file: the same code
    and words, and none of them names where the export root is."""
    _, client, root = _exporting_server(make_server, tmp_path)
    (root / "full").mkdir()
    (root / "full" / "old.sst").write_bytes(b"x")
    (root / "afile").write_bytes(b"x")
    with client:
        refusals = {
            name: status_of(lambda name=name: client.export(name))
            for name in ("../x", "/etc", "full", "afile", "afile/x")
        }
    for name, error in refusals.items():
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT, (name, error)
        assert str(root) not in error.details and str(tmp_path) not in error.details
    words = {error.details.replace(repr(name), "<out_dir>") for name, error in refusals.items()}
    assert len(words) == 1, words
    assert sorted(os.listdir(root)) == ["afile", "full"]


def test_export_is_off_without_an_export_root(client, tmp_path):
    error = status_of(lambda: client.export("x"))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "--export-root" in error.details


def test_export_is_refused_when_it_would_eat_the_reserve(make_server, tmp_path):
    # More than the whole disk: free space that grows meanwhile (other processes delete
    # files) cannot make room, as it could for a reserve of the free space measured now.
    reserve = shutil.disk_usage(tmp_path).total + 1
    _, client, root = _exporting_server(make_server, tmp_path, reserve_bytes=reserve)
    with client:
        error = status_of(lambda: client.export("big"))
    assert error.code == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "export_reserve_bytes" in error.details
    assert os.listdir(root) == []


def test_one_export_at_a_time(make_server, tmp_path):
    server, client, root = _exporting_server(make_server, tmp_path)
    with client:
        with server.engine.export_slot.take():  # an export in progress holds the slot
            busy = status_of(lambda: client.export("second"))
            assert busy.code == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "already running" in busy.details
            assert os.listdir(root) == []
        assert client.export("second").out_dir == str(root / "second")  # free again
