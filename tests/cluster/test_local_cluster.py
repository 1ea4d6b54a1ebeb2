"""`timerwheel local-cluster`, the copy-paste start of docs/cluster.md: it starts real NATS
servers and real nodes, reports ready only once every partition is with the node placement
prefers, serves calls on any node, and leaves no process behind, whether it is stopped
with SIGTERM or killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of, preferred_node
from timerwheel.common import State

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")
START_S = 150.0  # NATS servers electing, then nodes making their streams, on 2 busy cores


def start(tmp_path: Path, *flags: str) -> tuple[subprocess.Popen, dict]:
    """The command in the background, and the status line it prints once ready."""
    proc = subprocess.Popen(
        [TIMERWHEEL, "local-cluster", "--port", "0", "--dir", str(tmp_path / "c"), "--json",
         *flags],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    deadline = time.monotonic() + START_S
    try:
        line = proc.stdout.readline()  # the first line is printed once the cluster is ready
    except BaseException:  # the test's timeout: never leave it running
        proc.kill()
        proc.wait(timeout=30)
        raise
    if not line:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"local-cluster exited {proc.returncode} before ready:\n{err}")
    assert time.monotonic() < deadline
    return proc, json.loads(line)


def pids_of(status: dict) -> list[int]:
    return [entry["pid"] for entry in (*status["nodes"], *status["nats"])]


def wait_gone(pids: list[int], bound_s: float = 30.0) -> list[int]:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        alive = [pid for pid in pids if psutil.pid_exists(pid) and
                 psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]  # fmt: skip
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def test_it_starts_a_cluster_that_serves_and_stops_it_all_on_sigterm(tmp_path):
    proc, status = start(tmp_path, "--nodes", "2", "--partitions", "4")
    pids = pids_of(status)
    try:
        assert [n["name"] for n in status["nodes"]] == ["n1", "n2"]
        assert len(status["nats"]) == 3 and status["replicas"] == 3
        assert (tmp_path / "c" / "cluster.json").exists()
        first, second = (n["target"] for n in status["nodes"])
        names = [n["name"] for n in status["nodes"]]
        # ready means placed: each partition with the node placement prefers
        for node in status["nodes"]:
            with TimerClient(node["target"], timeout_s=10) as client:
                owned = sorted(client.stats().cluster.owned)
            assert owned == [p for p in range(4) if preferred_node(p, names) == node["name"]]
        # a timer sent through one node in every partition is known to the other
        ids = []
        n = 0
        while {partition_of(i, 4) for i in ids} != set(range(4)):
            n += 1
            ids.append(f"local-{n}")
        with TimerClient(first, timeout_s=10) as client:
            for message_id in ids:
                client.send("orders", b"hi", message_id=message_id, delay_ms="1h")
        with TimerClient(second, timeout_s=10) as client:
            for message_id in ids:
                assert client.get(message_id).state == State.SCHEDULED
    finally:  # twice, as an impatient operator does: a handler inside the wait must not hang
        proc.send_signal(signal.SIGTERM)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:  # never left running (its children die with it)
            proc.kill()
            proc.wait(timeout=30)
            raise
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    assert wait_gone(pids) == []
    assert (tmp_path / "c" / "n1" / "data").exists(), "--dir keeps the data"


def test_its_processes_die_with_it(tmp_path):
    proc, status = start(tmp_path, "--nodes", "1", "--nats", "1", "--partitions", "2")
    pids = pids_of(status)
    assert status["replicas"] == 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=WAIT_S)
    alive = wait_gone(pids)
    for pid in alive:  # never leave them, even when the assertion below fails
        os.kill(pid, signal.SIGKILL)
    assert alive == [], "every child dies with the command (PR_SET_PDEATHSIG)"


def test_a_bad_count_is_refused_naming_the_value(tmp_path):
    done = subprocess.run(
        [TIMERWHEEL, "local-cluster", "--nodes", "0", "--dir", str(tmp_path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert "nodes=0" in done.stderr
