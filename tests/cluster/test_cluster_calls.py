"""Calls against a three-node cluster (real nodes over a real JetStream cluster on
loopback): any node answers a call on any id (forwarded to the owner, docs/cluster.md),
`timerwheel stats` shows the partitions, their owners and epochs."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.cluster_nodes import ClusterRun, Consumer

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.common import State
from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")


def ids_in_every_partition(partitions: int, per_partition: int = 2) -> list[str]:
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(ids) < per_partition for ids in found.values()):
        n += 1
        message_id = f"order-{n}"
        ids = found[partition_of(message_id, partitions)]
        if len(ids) < per_partition:
            ids.append(message_id)
    return [message_id for ids in found.values() for message_id in ids]


def test_any_node_answers_for_any_id_and_stats_show_the_map(tmp_path):
    with ClusterRun(tmp_path) as run:
        owned = run.wait_all_owned()
        first, second, third = (run.servers[name] for name in ("n1", "n2", "n3"))
        ids = ids_in_every_partition(run.partitions)
        with TimerClient(first.target, timeout_s=10) as client:
            for message_id in ids:  # two thirds are another node's: forwarded
                result = client.send("orders", b"body", delay_ms="1h", message_id=message_id)
                assert result.message_id == message_id and not result.existed
            again = client.send("orders", b"body", delay_ms="1h", message_id=ids[0])
            assert again.existed  # an idempotent retry, answered by the owner
        with TimerClient(second.target, timeout_s=10) as client:
            for message_id in ids:
                timer = client.get(message_id)
                assert timer.topic == "orders" and timer.state is State.SCHEDULED
        with TimerClient(third.target, timeout_s=10) as client:
            for message_id in ids:
                client.cancel(message_id)
            series = client.send(
                "orders", b"b", delay_ms="1m", message_id="series-1",
                repeat=pb.Repeat(every_ms=60_000),
            )  # fmt: skip
            assert not series.existed  # a series is served too (test_cluster_series_bulk.py)
        with TimerClient(first.target, timeout_s=10) as client:
            assert all(client.get(i).state is State.CANCELLED for i in ids)

        # every node's Stats: the partitions it owns, and one owner and epoch per partition
        owners: dict[int, tuple[str, int]] = {}
        for name, server in run.servers.items():
            with TimerClient(server.target, timeout_s=10) as client:
                cluster = client.stats().cluster
            assert cluster.node == name and cluster.partitions == run.partitions
            assert sorted(cluster.owned) == owned[name]
            assert cluster.delivering
            for row in cluster.map:
                owner = (row.owner.split("/")[0], row.epoch)
                assert row.epoch > 0 and owners.setdefault(row.partition, owner) == owner
        assert {p: name for p, (name, _) in owners.items()} == {
            p: name for name, parts in owned.items() for p in parts
        }
        shown = subprocess.run(
            [TIMERWHEEL, "stats", "--target", first.target], capture_output=True, text=True,
            timeout=30,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert "cluster node      n1" in shown.stdout
        for partition, (name, epoch) in owners.items():
            assert any(
                line.split()[:2] == [str(partition), owners_holder(line, name)]
                and line.split()[3] == str(epoch)
                for line in shown.stdout.splitlines()
                if line.strip() and line.split()[0].isdigit()
            ), f"partition {partition} not shown as {name}, epoch {epoch}:\n{shown.stdout}"


def owners_holder(line: str, name: str) -> str:
    """The owner column of a stats row when it is `name`'s holder (name/incarnation)."""
    holder = line.split()[1]
    return holder if holder.split("/")[0] == name else ""


def test_one_consumer_on_one_node_gets_every_partition(tmp_path):
    """A plain client's Subscribe to one node is fanned in from every node, and its Acks
    reach each message's owner: every message is delivered to it once and ends ACKED."""
    with ClusterRun(tmp_path) as run:
        run.wait_all_owned()
        ids = ids_in_every_partition(run.partitions, per_partition=5)
        consumer = Consumer(
            "only", run.servers["n2"].target, run.topic, run.received, run.lock, own_only=False
        ).start()
        run.consumers.append(consumer)
        with TimerClient(run.servers["n3"].target, timeout_s=10) as client:
            for message_id in ids:
                client.send(run.topic, b"b", delay_ms="1s", message_id=message_id)
        deadline = time.monotonic() + 30
        while True:
            with run.lock:
                got = [r.message_id for r in run.received]
            if set(got) >= set(ids) or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert sorted(got) == sorted(ids)  # all of them, each once
        with TimerClient(run.servers["n1"].target, timeout_s=10) as client:
            deadline = time.monotonic() + 10
            while True:
                states = {i: client.get(i).state.name for i in ids}
                if set(states.values()) == {"ACKED"}:
                    break
                assert time.monotonic() < deadline, f"acks did not reach the owners: {states}"
                time.sleep(0.1)
