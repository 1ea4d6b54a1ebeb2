"""A stream's replication as the node reads it from JetStream's stream info
(timerwheel.cluster.replication): on StreamInfo objects as nats-py decodes them, and from
a real three-node cluster's owners (Stats and `timerwheel stats`) with one NATS server
killed."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.cluster_nodes import ClusterRun
from nats.js.api import StreamInfo

from timerwheel.client import TimerClient
from timerwheel.cluster.replication import Replication, replication_of
from timerwheel.v1 import timerwheel_pb2 as pb

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")


def info(cluster: dict | None) -> StreamInfo:
    response = {
        "config": {"name": "timerwheel-p0"},
        "state": {"messages": 0, "bytes": 0, "first_seq": 0, "last_seq": 0, "consumer_count": 0},
    }
    if cluster is not None:
        response["cluster"] = cluster
    return StreamInfo.from_response(response)


def test_a_healthy_r3_stream_has_its_leader_and_three_current_replicas():
    found = replication_of(info({
        "name": "c", "leader": "nats-a",
        "replicas": [{"name": "nats-b", "current": True, "active": 1, "lag": 0},
                     {"name": "nats-c", "current": True, "active": 1}],
    }))  # fmt: skip
    assert found == Replication("nats-a", 3, 0)


def test_an_offline_or_lagging_follower_is_not_current_and_its_lag_shows():
    found = replication_of(info({
        "name": "c", "leader": "nats-a",
        "replicas": [{"name": "nats-b", "current": False, "offline": True, "active": 9, "lag": 40},
                     {"name": "nats-c", "current": True, "active": 1, "lag": 2}],
    }))  # fmt: skip
    assert found == Replication("nats-a", 2, 40)


def test_no_leader_during_an_election_and_an_unclustered_stream():
    assert replication_of(info({"name": "c", "replicas": []})) == Replication("", 0, 0)
    assert replication_of(info(None)) == Replication("", 1, 0)


@pytest.mark.system
@pytest.mark.timeout(240)
def test_owners_report_their_streams_replication(tmp_path):
    with ClusterRun(tmp_path) as run:
        run.wait_all_owned()
        target = run.servers["n1"].target
        assert run.nats is not None
        servers = {node.name for node in run.nats.nodes}

        def owned_rows() -> list[pb.ClusterPartition]:
            with TimerClient(target, timeout_s=10) as client:
                cluster = client.stats().cluster
            return [row for row in cluster.map if row.partition in cluster.owned]

        def wait_rows(condition, what: str, bound_s: float = 60) -> list[pb.ClusterPartition]:
            deadline = time.monotonic() + bound_s
            while True:
                rows = owned_rows()
                if rows and condition(rows):
                    return rows
                assert time.monotonic() < deadline, f"{what}: {rows}"
                time.sleep(0.2)

        rows = wait_rows(
            lambda rows: all(r.replicas_current == 3 and r.stream_leader for r in rows),
            "a healthy cluster: every owned stream led and three replicas current",
        )  # fmt: skip
        assert {r.stream_leader for r in rows} <= servers and all(r.replica_lag == 0 for r in rows)
        shown = subprocess.run(
            [TIMERWHEEL, "stats", "--target", target], capture_output=True, text=True, timeout=30
        )
        assert shown.returncode == 0, shown.stderr
        assert "stream leader" in shown.stdout
        leader_rows = [
            line.split() for line in shown.stdout.splitlines()
            if line.split() and line.split()[0] == str(rows[0].partition)
        ]  # fmt: skip
        assert leader_rows and rows[0].stream_leader in leader_rows[0]

        # one NATS server gone (not the one leading the first owned stream, so a leader
        # stays named): the streams it followed have two current replicas
        nats = run.nats
        assert nats is not None
        victim = next(node for node in nats.nodes if node.name != rows[0].stream_leader)
        nats.kill(victim)
        wait_rows(
            lambda rows: all(r.replicas_current <= 2 for r in rows)
            and all(r.stream_leader != victim.name for r in rows),
            f"{victim.name} killed: no owned stream with three current replicas",
        )  # fmt: skip
