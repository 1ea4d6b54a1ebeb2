"""Prometheus metrics of `timerwheel serve --workers 2` (a real supervisor and its engine,
delivery and worker processes): the same scenario as tests/observability/test_metrics.py moves every
metric by the same amounts, counted in whichever process did the work and summed by the
supervisor from prometheus_client's multiprocess files."""

from __future__ import annotations

import os
import signal

import pytest
from helpers.metrics_scenario import clock_offset_to_second, run_scenario, scrape, value
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.observability.metrics_http import ScrapeGauges
from timerwheel.procs.ipc import PeerUnavailable

# system: a `serve --workers 2` process tree
pytestmark = [pytest.mark.system, pytest.mark.wallclock]

SENDS = 10


def test_metrics_of_every_process_are_summed_by_the_supervisor(
    tmp_path, serve_process, monkeypatch
):
    offset = clock_offset_to_second(50)  # the processes take a few seconds to start
    monkeypatch.setenv("TIMERWHEEL_CLOCK_OFFSET_MS", f"{offset}ms")
    server = serve_process(
        tmp_path / "data", "--workers", "2", "--metrics-port", "0",
        "--set", "minute_cascade_lead_ms=1s", "--set", "first_delivery_hold_ms=1m",
    )  # fmt: skip
    runtime = server.tmp_dir  # the server's TMPDIR: its supervisor's runtime dir is there
    port = int(server.wait_event("metrics_serving")["port"])
    [supervisor_dir] = os.listdir(runtime)
    assert os.listdir(os.path.join(runtime, supervisor_dir, "metrics"))  # children's files
    run_scenario(server.target, port, offset)
    calls_are_summed_over_the_workers(server.target, port)

    server.signal(signal.SIGTERM)
    assert server.wait_exit() == 0
    assert os.listdir(runtime) == []  # the multiprocess files went with the supervisor


def calls_are_summed_over_the_workers(target: str, port: int) -> None:
    """Sends on connections of their own (the kernel spreads them over the workers) are
    each counted once in grpc_server_handled_total; the supervisor, which serves /metrics,
    exposes its own process_* and python_* families and the build info."""
    labels = {
        "grpc_service": "timerwheel.v1.TimerService", "grpc_method": "Send",
        "grpc_type": "unary", "grpc_code": "OK",
    }  # fmt: skip
    before = scrape(port)
    for _ in range(SENDS):
        with TimerClient(target, timeout_s=WAIT_S) as client:
            client.send("summed", b"x", delay_ms=60_000)
    after = scrape(port)
    assert value(after, "grpc_server_handled_total", **labels) - value(
        before, "grpc_server_handled_total", **labels
    ) == SENDS  # fmt: skip
    timed = {k: v for k, v in labels.items() if k != "grpc_code"}
    assert value(after, "grpc_server_handling_seconds_count", **timed) - value(
        before, "grpc_server_handling_seconds_count", **timed
    ) == SENDS  # fmt: skip
    names = {name for name, _ in after}
    assert {"process_cpu_seconds_total", "python_info", "timerwheel_build_info"} <= names


def test_writer_up_is_0_when_the_engine_does_not_answer():
    def unreachable() -> dict:
        raise PeerUnavailable("the engine process is not available")

    families = {f.name: f for f in ScrapeGauges(unreachable, lambda: 3).collect()}
    assert families["timerwheel_writer_up"].samples[0].value == 0
    assert families["timerwheel_subscribers"].samples[0].value == 3
    assert "timerwheel_writer_queue_ops" not in families  # not reported as 0: unknown
