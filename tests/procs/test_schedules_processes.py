"""Pausing, resuming and sending a cancelled series again through `timerwheel serve
--workers 1`: PauseSeries crosses from a gRPC worker process to the engine process
(`procs/engine_host.py` REMOTE_CALLS) and behaves as in one process."""

from __future__ import annotations

import pytest

from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.system  # a `serve --workers 1` process tree

HOUR_MS = 3_600_000


def test_pause_resume_and_replace_of_a_cancelled_series_across_processes(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "1")
    with server.client() as client:
        repeat = pb.Repeat(every_ms=HOUR_MS, missed=pb.MISSED_FIRE_EACH, max_catch_up=2)
        sent = client.send("jobs", b"v1", delay_ms=HOUR_MS, message_id="s", repeat=repeat)
        paused = client.pause_series("s")
        assert (paused.changed, paused.deliver_at_ms) == (True, sent.deliver_at_ms)
        info = client.get("s", include_trace=True)
        assert info.paused and info.repeat.max_catch_up == 2
        assert pb.TraceKind.Name(info.trace[-1].kind) == "TRACE_PAUSED"
        assert client.resume_series("s").changed and not client.get("s").paused

        assert client.cancel("s") == pb.CANCELLED
        again = client.send("jobs", b"v2", delay_ms=HOUR_MS, message_id="s", repeat=repeat,
                            if_exists=pb.IF_EXISTS_REPLACE)  # fmt: skip
        assert not again.existed
        kinds = [pb.TraceKind.Name(e.kind) for e in client.get("s", include_trace=True).trace]
        assert kinds == ["TRACE_SENT", "TRACE_PAUSED", "TRACE_RESUMED", "TRACE_CANCELLED",
                         "TRACE_REPLACED", "TRACE_SENT"]  # fmt: skip
