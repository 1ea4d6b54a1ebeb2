"""Logging of `timerwheel serve` (timerwheel.observability.log_config) when its stdout's reader goes
away.

A server's stdout is often a pipe to whatever started it (the load-test harness, a log
shipper). When that process dies, writes fail with EPIPE; the server must go on, and
stop on SIGTERM as it would with the pipe: once, a log line raised out of `stop()` and a
server with an open Subscribe stream never exited (CI: an orphaned server after a
SIGKILLed `timerwheel loadtest`).
"""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import threading

import pytest
import structlog
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.observability.log_config import configure_logging
from timerwheel.types import RemoteError

pytestmark = pytest.mark.timeout(120)


def test_a_log_line_to_a_pipe_without_reader_is_dropped_and_the_stream_points_at_devnull(
    monkeypatch,
):
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone
    pipe = io.TextIOWrapper(io.FileIO(write_end, "w"), line_buffering=True)
    monkeypatch.setattr(sys, "stdout", pipe)
    try:
        configure_logging("info", "json")
        log = structlog.get_logger("timerwheel.test")
        log.info("first_line")  # EPIPE: dropped, not raised
        log.info("second_line")
        assert os.readlink(f"/proc/self/fd/{write_end}") == os.devnull
    finally:
        monkeypatch.undo()
        pipe.close()
        configure_logging("info", "json")


@pytest.mark.system  # spawned `timerwheel serve`, one with --workers 2
@pytest.mark.parametrize("extra", [(), ("--workers", "2")], ids=["one process", "workers 2"])
def test_sigterm_stops_a_server_whose_stdout_reader_is_gone(tmp_path, extra):
    args = [
        sys.executable, "-m", "timerwheel.cli.main", "serve", "--data-dir", str(tmp_path / "data"),
        "--host", "127.0.0.1", "--port", "0", "--log-format", "json", *extra,
    ]  # fmt: skip
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": str(tmp_path)}
    server = subprocess.Popen(
        args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        port = _port_once_started(server)
        client = TimerClient(f"127.0.0.1:{port}", timeout_s=WAIT_S)
        stream = client.subscribe("gone", 10)  # a stream open at SIGTERM held it for ever
        received = threading.Event()
        ended = threading.Thread(target=_consume, args=(stream, received), daemon=True)
        ended.start()
        client.send("gone", b"x", delay_ms=0)
        assert received.wait(WAIT_S)  # the stream is open and serving
        server.stdout.close()  # whatever read the server's output is gone
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == 0
        ended.join(WAIT_S)
        client.close()
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(timeout=WAIT_S)


def _port_once_started(server: subprocess.Popen) -> int:
    for line in server.stdout:
        if '"server_started"' in line:
            return int(json.loads(line)["port"])
    raise AssertionError(f"the server exited with {server.wait()} before it started")


def _consume(stream, received: threading.Event) -> None:
    try:
        for _ in stream:
            received.set()
    except RemoteError:  # UNAVAILABLE: the server is shutting down
        pass
