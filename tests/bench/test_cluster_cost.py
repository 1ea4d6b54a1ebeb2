"""bench/cluster_cost.py: the same load against one node and against a cluster, each
message sent, fired and acked, its CPU split by node. Real processes, real NATS servers;
the figures themselves are the machine's (never asserted), what the run must show is."""

from __future__ import annotations

import json

import pytest
from helpers.bench_runs import run_bench

pytestmark = [pytest.mark.system, pytest.mark.timeout(400)]  # system: spawns a cluster


def test_single_node_and_two_nodes_deliver_every_message_and_split_the_partitions(tmp_path):
    out = tmp_path / "cost.json"
    done = run_bench(
        "cluster_cost", "--shapes", "single,2", "--rate", "200", "--duration", "8s",
        "--warmup", "3s", "--json", str(out), timeout_s=360,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    single, two = json.loads(out.read_text())
    for shape in (single, two):
        assert shape["sent"] > 0 and shape["lost"] == 0, shape
        assert shape["cpu_us_per_message"] > 0 and shape["send_latency_ms"]["p99"] > 0
    assert single["nats_cpu_us_per_message"] == 0  # no NATS beside one node
    assert two["nats_cpu_us_per_message"] > 0  # the log's replicas do work in cluster mode
    owned = two["partitions_by_node"]
    assert sorted(p for ps in owned.values() for p in ps) == list(range(6))
    assert all(owned.values()), f"partitions spread over both nodes: {owned}"
    assert two["owners_moved_in_window"] is False  # measured on a settled map
    assert set(two["cpu_us_per_own_message_by_node"]) == {"n1", "n2"}
