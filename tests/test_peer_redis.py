"""bench/peer_redis.py, the Redis sorted-set peer of the benchmarks, run small: it starts
its own redis-server on loopback, delivers every message on time, reports the figures the
benchmark docs cite, and leaves no redis-server behind."""

from __future__ import annotations

import json
import subprocess
import sys

import psutil
import pytest

pytestmark = pytest.mark.timeout(120)


def redis_servers() -> set[int]:
    return {p.pid for p in psutil.process_iter(["name"]) if p.info["name"] == "redis-server"}


def test_peer_redis_small_run(tmp_path):
    before = redis_servers()
    out = tmp_path / "peer.json"
    args = [
        sys.executable, "-m", "bench.peer_redis", "--rate", "1000", "--duration", "2",
        "--delay-scale", "0.005", "--producers", "2", "--batch", "50", "--json", str(out),
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=100)
    assert done.returncode == 0, done.stderr
    figures = json.loads(out.read_text())
    assert figures["sent"] == 2_000 and figures["received"] == 2_000 and figures["lost"] == 0
    assert figures["early"] == 0
    errors = figures["delay_error_ms"]
    assert 0 < errors["p50"] <= errors["p99"] <= errors["p999"] <= errors["max"]
    assert redis_servers() - before == set()  # its redis-server was stopped
