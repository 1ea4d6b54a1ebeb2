"""bench/peer_redis.py, the Redis sorted-set peer of the benchmarks, run small: it starts
its own redis-server on loopback, runs the loadtest's tdmq, burst and backlog shapes,
delivers every message on time, reports the figures the benchmark docs cite, and leaves
no redis-server behind: not when it ends, not when it is sent SIGTERM or SIGKILL in the
middle of a run."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from helpers.processes import descendants

from timerwheel.loadtest.interpreter import interpreter
from timerwheel.loadtest.scenarios import scenario

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: redis-server


def redis_servers() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "redis-server"}


def test_peer_redis_small_run(tmp_path):
    before = redis_servers()
    out = tmp_path / "peer.json"
    args = [
        sys.executable, "-m", "bench.peer_redis", "--rate", "1000", "--duration", "2s",
        "--delay-scale", "0.005", "--producers", "2", "--batch", "50", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["sent"] == 2_000 and figures["received"] == 2_000 and figures["lost"] == 0
    assert figures["early"] == 0
    assert figures["python"] == interpreter()  # the harness's, as the loadtest's figures say
    errors = figures["delay_error_ms"]
    assert 0 < errors["p50"] <= errors["p99"] <= errors["p999"] <= errors["max"]
    timeline = figures["timeline"]  # per second of deliver time, as the loadtest's
    assert [row["second"] for row in timeline] == list(range(len(timeline)))
    worst = max(row["delay_max_ms"] for row in timeline)
    assert max(worst, 1) == errors["max"]  # the histogram records at least 1 ms
    assert any(row["server_cpu_percent"] for row in timeline)  # Redis's CPU then
    # and the machine's, harness included: busy, and at least Redis's own share
    assert any(row["machine_cpu_percent"] for row in timeline)
    assert all(
        row["machine_cpu_percent"] + 25 >= row["server_cpu_percent"]
        for row in timeline
        if row["machine_cpu_percent"] is not None and row["server_cpu_percent"] is not None
    )
    assert all("fire_max_ms" not in row for row in timeline)  # Redis has no fire time
    assert redis_servers() - before == set()  # its redis-server was stopped


@pytest.mark.timeout(400)  # bounds for a machine other work fills: an end, not a speed
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
def test_a_signalled_run_leaves_no_process_or_directory(tmp_path, signum):
    args = [
        sys.executable, "-m", "bench.peer_redis", "--rate", "1000", "--duration", "60s",
        "--producers", "2",
    ]  # fmt: skip
    run = subprocess.Popen(
        args, env={**os.environ, "TMPDIR": str(tmp_path)}, stdout=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 120
        while len(descendants(run.pid)) < 5:  # redis-server, tracker, consumer, 2 producers
            assert run.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        started = descendants(run.pid)
        run.send_signal(signum)
        run.wait(timeout=120)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
    _, alive = psutil.wait_procs(started, timeout=120)
    left = [process.pid for process in alive]
    for process in alive:  # a failing run must not leave them to the next tests
        process.kill()
    assert left == []
    if signum == signal.SIGTERM:
        assert run.returncode == 143
        assert list(tmp_path.iterdir()) == []  # redis-server's directory is removed


def run_peer(tmp_path, *flags: str) -> dict:
    out = tmp_path / "peer.json"
    args = [sys.executable, "-m", "bench.peer_redis", *flags, "--json", str(out)]
    done = subprocess.run(args, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    return json.loads(out.read_text())


def test_burst_delivers_all_inside_one_window_after_the_sends(tmp_path):
    figures = run_peer(
        tmp_path, "--scenario", "burst", "--count", "20000", "--rate", "20000",
        "--burst-lead", "1s",
    )  # fmt: skip
    assert figures["sent"] == figures["received"] == 20_000
    assert figures["lost"] == figures["early"] == figures["pending"] == 0
    # due over the whole 1 s window (the last of 20,000 uniform times is in its last 0.1 s)
    # and nothing before it opened: the window is where the loadtest's burst puts it
    assert figures["last_received_after_window_opened_ms"] >= 900
    # the loadtest's own burst, changed by the same flags
    shape = scenario("burst").with_overrides(count=20_000, rate=20_000, burst_lead_ms=1_000)
    assert figures["shape"] == dataclasses.asdict(shape)


def test_backlog_keeps_every_message_and_reports_memory_and_disk(tmp_path):
    figures = run_peer(tmp_path, "--scenario", "backlog", "--count", "20000", "--rate", "20000")
    assert figures["sent"] == figures["pending"] == 20_000
    assert "received" not in figures  # nothing is due for days: no consumer runs
    assert figures["memory_after_send_phase"]["used_memory"] > 20_000 * 64
    assert figures["redis_peak_rss_bytes"] > 20_000 * 64  # (VmHWM, which lags RSS a little)
    assert figures["disk"]["bytes"] > 20_000 * 64  # the AOF holds every member


def test_bad_flags_exit_2_naming_the_field_before_anything_starts():
    before = redis_servers()
    args = [sys.executable, "-m", "bench.peer_redis", "--scenario", "burst", "--rate", "0"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "rate=0: must be at least 1" in done.stderr
    assert redis_servers() - before == set()
