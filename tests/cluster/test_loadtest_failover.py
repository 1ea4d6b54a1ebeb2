"""`timerwheel loadtest --scenario failover` against a real three-node cluster (real nodes
over a real JetStream cluster on loopback, tests/helpers/cluster_nodes.py): the CLI, run
as a user runs it, kill -9s the node owning the most partitions mid-run and prints the
fault suite's table; nothing lost, nothing early, the partitions taken over within the
10 s bound, and the JSON figures all there."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cluster_nodes import ClusterRun

pytestmark = [pytest.mark.system, pytest.mark.timeout(600)]

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")
RUN_BOUND_S = 360  # the run: 20 s of sends, then up to 2 min of drain; slow shared cores


def test_failover_scenario_kills_a_node_and_prints_the_fault_suite_table(tmp_path):
    with ClusterRun(tmp_path) as run:
        owned = run.wait_all_owned()
        victim = max(owned, key=lambda name: len(owned[name]))
        targets = ",".join(server.target for server in run.servers.values())
        out = tmp_path / "failover.json"
        done = subprocess.run(
            [
                TIMERWHEEL, "loadtest", "--scenario", "failover", "--target", targets,
                "--fault", f"kill -9 {run.servers[victim].proc.pid}", "--fault-at", "8s",
                "--duration", "20s", "--rate", "200", "--no-progress", "--json", str(out),
            ],
            capture_output=True, text=True, timeout=RUN_BOUND_S,
        )  # fmt: skip
        print(done.stdout, done.stderr[-3000:], sep="\n")
        assert run.servers[victim].proc.poll() is not None  # the fault was made
    fig = json.loads(out.read_text())
    assert done.returncode == 0, fig["problems"]
    assert fig["lost"] == 0 and fig["early"] == 0
    assert fig["acknowledged"] > 0 and fig["accounting"]["balanced"]
    assert fig["fault"]["exit_status"] == 0
    failover = fig["failover"]
    assert set(owned[victim]) <= set(failover["partitions_moved"])
    assert failover["lease_taken_s"] is not None and failover["lease_taken_s"] <= 10
    assert failover["first_fire_s"] is not None  # every moved partition fired again
    for partition in owned[victim]:
        assert failover["by_partition"][str(partition)]["lease_taken_s"] <= 10
    assert fig["due_in_fault_window"] > 0
    assert {"p50", "p99", "max"} <= set(fig["lateness_ms"])
    assert "lease taken" in done.stdout and "| acknowledged | lost | early |" in done.stdout


def test_a_fault_that_lasts_is_measured_while_it_runs(tmp_path):
    """SIGSTOP of the busiest owner for 8 s (twice the lease), then SIGCONT, as one fault
    command: its partitions are taken over while it is stopped, so the failover figure
    is below the command's 8 s, and nothing is lost or early."""
    with ClusterRun(tmp_path) as run:
        owned = run.wait_all_owned()
        victim = max(owned, key=lambda name: len(owned[name]))
        pid = run.servers[victim].proc.pid
        targets = ",".join(server.target for server in run.servers.values())
        out = tmp_path / "failover.json"
        done = subprocess.run(
            [
                TIMERWHEEL, "loadtest", "--scenario", "failover", "--target", targets,
                "--fault", f"kill -STOP {pid}; sleep 8; kill -CONT {pid}", "--fault-at", "8s",
                "--duration", "20s", "--rate", "200", "--no-progress", "--json", str(out),
            ],
            capture_output=True, text=True, timeout=RUN_BOUND_S,
        )  # fmt: skip
        print(done.stdout, done.stderr[-3000:], sep="\n")
    fig = json.loads(out.read_text())
    assert done.returncode == 0, fig["problems"]
    assert fig["lost"] == 0 and fig["early"] == 0
    assert fig["fault"]["took_ms"] >= 8_000
    assert set(owned[victim]) <= set(fig["failover"]["partitions_moved"])
    assert fig["failover"]["lease_taken_s"] is not None
    assert fig["failover"]["lease_taken_s"] < 8
