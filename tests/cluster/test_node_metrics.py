"""A cluster node's /metrics families (observability.metrics_http.cluster_families) from
its own map (ClusterNode.cluster_map), over a real engine; leases set as the lease logic
leaves them (no NATS: the map is the node's own view)."""

from __future__ import annotations

import time

from helpers.engines import T0, engine_factory

from timerwheel.cluster.appender import monotonic_ms
from timerwheel.cluster.lease import Held, LeaseEntry, LeaseValue, LeaseView
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.replication import Replication
from timerwheel.cluster.settings import NodeSettings
from timerwheel.observability.metrics_http import cluster_families
from timerwheel.wheels.clock import VirtualClock


def samples(families) -> dict[str, dict[tuple, float]]:
    found: dict[str, dict[tuple, float]] = {}
    for family in families:
        for sample in family.samples:
            found.setdefault(sample.name, {})[tuple(sample.labels.values())] = sample.value
    return found


def test_the_metrics_show_each_partitions_owner_epoch_and_this_nodes_share(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 3), make())
        node.address = "127.0.0.1:7071"
        node._views = {p: LeaseView(p, node.holder, node.node.lease) for p in range(3)}
        other = LeaseEntry(LeaseValue("n2/abcd", 0, 1, "127.0.0.1:7072"), 41)
        node._views[1] = LeaseView(1, node.holder, node.node.lease, seen=other)
        mine = LeaseEntry(LeaseValue(node.holder, 0, 1, node.address), 57)
        # renewed "now" on the lease clock, so its verdict is OWN
        held = Held(epoch=57, revision=57, renewed_at_ms=monotonic_ms(), marker_sequence=3)
        node._views[2] = LeaseView(2, node.holder, node.node.lease, held=held, seen=mine)
        node._owned[2] = FakeAppender()  # type: ignore[assignment]
        # the last stream-info round: read for 2 (owned) and, left from before, 1 (not now)
        node.replication._seen = {2: Replication("nats-b", 2, 7), 1: Replication("nats-a", 3, 0)}

        found = samples(cluster_families(node.cluster_map()))

    assert found["timerwheel_cluster_partitions"][()] == 3
    assert found["timerwheel_cluster_partitions_owned"][()] == 1
    assert found["timerwheel_cluster_partition_epoch"] == {("0",): 0, ("1",): 41, ("2",): 57}
    assert found["timerwheel_cluster_partition_owned"] == {("0",): 0, ("1",): 0, ("2",): 1}
    assert found["timerwheel_cluster_log_sequence"] == {("2",): 12}
    # replication only for what this node owns now, as its last read found it
    assert found["timerwheel_cluster_replicas_current"] == {("2",): 2}
    assert found["timerwheel_cluster_replica_lag"] == {("2",): 7}
    assert found["timerwheel_cluster_stream_leader"] == {("2", "nats-b"): 1}


class FakeAppender:
    """What the map reads of an owned partition's appender."""

    appended = 9
    last_sequence = 12


def test_the_metrics_show_this_nodes_standbys_and_its_owned_partitions_snapshots(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 3), make())
        node.address = "127.0.0.1:7071"
        node._views = {p: LeaseView(p, node.holder, node.node.lease) for p in range(3)}
        mine = LeaseEntry(LeaseValue(node.holder, 0, 1, node.address), 57)
        held = Held(epoch=57, revision=57, renewed_at_ms=monotonic_ms(), marker_sequence=3)
        node._views[2] = LeaseView(2, node.holder, node.node.lease, held=held, seen=mine)
        node._owned[2] = FakeAppender()  # type: ignore[assignment]
        node.standbys.running[0] = FakeStandby()  # type: ignore[assignment]
        ten_s_ago = time.time_ns() // 1_000_000 - 10_000
        node.replication._seen = {2: Replication("nats-b", 3, 0, 11, ten_s_ago)}

        rows = {row["partition"]: row for row in node.cluster_map()["map"]}
        found = samples(cluster_families(node.cluster_map()))

    assert (rows[0]["standby_sequence"], rows[0]["standby_lag"]) == (40, 5)
    assert rows[2]["snapshot_sequence"] == 11 and 10_000 <= rows[2]["snapshot_age_ms"] < 70_000
    assert (rows[1]["standby_sequence"], rows[1]["snapshot_sequence"]) == (0, 0)
    assert found["timerwheel_cluster_standby_sequence"] == {("0",): 40}
    assert found["timerwheel_cluster_standby_lag"] == {("0",): 5}
    assert found["timerwheel_cluster_snapshot_sequence"] == {("2",): 11}
    (age,) = found["timerwheel_cluster_snapshot_age_seconds"].values()
    assert 10 <= age < 70


class FakeStandby:
    """What the map reads of a running standby: folded through 40, the stream at 45."""

    fold = object()
    through = 40
    lag = 5
