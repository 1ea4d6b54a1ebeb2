"""What a node does to its engine when it gives a partition up (ClusterNode._purge): every
timer of that partition leaves, scheduled or fired, and no other partition's does. Over a
real engine on RocksDB; no NATS (the purge is the node's own business)."""

from __future__ import annotations

from helpers.engines import T0, engine_factory

from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.partitions import partition_of
from timerwheel.cluster.settings import NodeSettings
from timerwheel.common import State
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind

PARTITIONS = 4


def test_purge_removes_one_partitions_timers_and_nothing_else(tmp_path):
    clock = VirtualClock(T0)
    with engine_factory(tmp_path, clock) as make:
        engine = make()
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), PARTITIONS), engine)
        ids = [f"order-{n}" for n in range(40)]
        soon = [SendSpec("orders", b"b", When(WhenKind.DELAY, 1_000), message_id=i) for i in ids]
        later = [
            SendSpec("audit", b"b", When(WhenKind.DELAY, 3_600_000), message_id=f"{i}-later")
            for i in ids
        ]
        engine.send_batch(soon + later)
        clock.advance(2_000)
        engine.run_until_idle()  # the "orders" timers fire; the "audit" ones wait an hour
        assert engine.get(ids[0]).state is State.FIRED

        node._purge(1)

        for message_id in ids + [f"{i}-later" for i in ids]:
            state = engine.get(message_id).state
            if partition_of(message_id, PARTITIONS) == 1:
                assert state in (State.CANCELLED, State.ACKED), message_id
            else:
                assert state in (State.FIRED, State.SCHEDULED), message_id
        assert not node._purging  # delivery may resume
        gone = sum(partition_of(i, PARTITIONS) == 1 for i in ids)
        assert 0 < gone < len(ids)
