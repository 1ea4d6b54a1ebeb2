"""Placement's choices (cluster/placement.py): the standby of a partition is the node that
takes it when its owner goes, and a partition refused for its snapshot is not taken
again before the refusal's end. Pure: no NATS."""

from __future__ import annotations

from timerwheel.cluster.partitions import preferred_node
from timerwheel.cluster.placement import Placement

NODES = {"n1", "n2", "n3", "n4"}


def placement(name: str = "n1") -> Placement:
    made = Placement(name, renew_every_ms=1_000, grace_ms=3_000)
    made.live_nodes = set(NODES)
    return made


def test_the_standby_is_the_preferred_node_once_the_owner_is_gone():
    chooser = placement()
    for partition in range(64):
        for owner in NODES:
            standby = chooser.standby(partition, owner)
            assert standby != owner
            assert standby == preferred_node(partition, NODES - {owner})
        assert chooser.standby(partition, None) == preferred_node(partition, NODES)


def test_a_refused_partition_is_not_taken_before_the_refusal_ends():
    chooser = placement()
    mine = next(p for p in range(64) if chooser.preferred(p) == "n1")
    assert chooser.may_take(mine, 10_000)
    chooser.refuse(mine, 40_000)
    assert not chooser.may_take(mine, 39_999)
    assert chooser.may_take(mine, 40_000)
