"""The issue 13 RPCs, and message traces, through `timerwheel serve --workers 1`: each call
crosses from a gRPC worker process to the engine or delivery process, and still behaves as
in one process."""

from __future__ import annotations

import pytest
from helpers.streams import Collector
from helpers.time_of_day import wall_ms

from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.system  # a `serve --workers 1` process tree


def test_nack_dead_letters_series_reschedule_and_count_across_processes(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "1")
    with server.client() as client:
        jobs = Collector(client, "jobs", auto_ack=False)
        dead = Collector(client, "jobs.dlq")
        ticks = Collector(client, "ticks")
        try:
            message_id = client.send("jobs", b"x", delay_ms=0, max_attempts=1).message_id
            jobs.wait_count(1)
            response = client.nack("jobs", [message_id], reason="broken")
            assert (response.nacked, response.dead_lettered) == (1, 1)
            [letter] = dead.wait_count(1)
            assert letter.properties["timerwheel.dead_letter.reason"] == "broken"
            traced = client.get(message_id, include_trace=True)  # written by the engine
            assert [pb.TraceKind.Name(e.kind).removeprefix("TRACE_") for e in traced.trace] == [
                "SENT", "FIRED", "DELIVERED", "NACKED", "DEAD_LETTERED", "FIRED", "DELIVERED",
                "ACKED",
            ]  # fmt: skip
            assert traced.trace[4].detail == "jobs.dlq" and traced.attempts == 1

            client.send("ticks", b"t", message_id="s", repeat=pb.Repeat(every_ms=100, max_count=2))
            assert [d.message_id for d in ticks.wait_count(2)] == ["s#1", "s#2"]

            later = client.send("jobs", b"y", delay_ms=3_600_000).message_id
            assert client.count("jobs").pending == 1
            moved = client.reschedule(later, delay_ms=7_200_000)
            assert moved >= wall_ms() + 7_000_000
            assert client.count("jobs", moved - moved % 60_000, moved + 1).pending == 1
        finally:
            for collector in (jobs, dead, ticks):
                collector.stop()
