"""bench/grpc_floor.py, run small: its servers share one port and answer every Send the
harness's producer offers, it reports the CPU a call of each side, and nothing it started
is left running."""

from __future__ import annotations

import psutil
import pytest
from helpers.bench_runs import bench_figures, run_bench

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: server processes on one port


def floor_processes() -> set[int]:
    return {
        p.pid
        for p in psutil.process_iter(["cmdline"])
        if any("grpc_floor" in part for part in p.info["cmdline"] or ())
    }


def test_two_servers_on_one_port_answer_every_call_offered():
    before = floor_processes()
    figures = bench_figures(
        "grpc_floor", "--servers", "2", "--producers", "2", "--connections", "2",
        "--rate", "400", "--duration", "1",
    )  # fmt: skip
    assert figures["servers"] == 2 and figures["calls"] == 400
    assert 0 < figures["calls_per_s"] <= 400 * 1.5
    assert figures["server_cpu_us_per_call"] > 0 and figures["producer_cpu_us_per_call"] > 0
    assert len(figures["load_before"]) == 3
    assert floor_processes() - before == set()


def test_a_bad_flag_is_refused_with_its_value():
    done = run_bench("grpc_floor", "--servers", "0", timeout_s=60)
    assert done.returncode == 2
    assert "--servers=0" in done.stderr
