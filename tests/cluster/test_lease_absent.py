"""A partition found without an owner by a node not let to take it (another node is
preferred, within its grace): the node reads the key again at its read interval and learns
who took it, so a call on that partition is answered "not owner, owner is n2 at ..." and
routed there, not "no owner at the moment" until the grace ran out. (A node that kept the
absent read and only tried to create, refused each tick by placement, answered "no owner"
for the whole grace after every start and failover: a client's retries ran out meanwhile.)
No NATS: `ClusterNode._step` over scripted lease answers, and a real engine on RocksDB."""

from __future__ import annotations

import asyncio

import pytest
from helpers.engines import T0, engine_factory

from timerwheel.cluster.errors import NotOwner
from timerwheel.cluster.lease import Create, LeaseEntry, LeaseValue, LeaseView, Read
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock

PARTITION = 2


def test_a_node_not_let_to_take_an_absent_partition_reads_again_and_learns_its_owner(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 4), make())
        node._views = {p: LeaseView(p, node.holder, node.node.lease) for p in range(4)}
        node._may_take = lambda partition, now: False  # type: ignore[method-assign]
        every = node.node.lease.renew_every_ms
        taken = LeaseEntry(LeaseValue("n2/abc", 9, 0, "127.0.0.1:7002"), 9)
        store: dict[str, LeaseEntry | None] = {"entry": None}
        asked: list[str] = []

        async def call(request):
            asked.append(type(request).__name__)
            assert isinstance(request, Read | Create)
            if isinstance(request, Create):
                return None  # never reached: placement refuses the create
            return store["entry"]

        node._call = call  # type: ignore[method-assign]

        asyncio.run(node._step(PARTITION, 1_000))  # nobody holds it yet
        assert asked == ["Read"] and node._views[PARTITION].absent
        store["entry"] = taken  # n2, the preferred node, takes it

        for now in range(1_000 + node.node.tick_ms, 1_000 + every, node.node.tick_ms):
            asyncio.run(node._step(PARTITION, now))
        assert asked == ["Read"], "within the read interval: no call (the create is refused)"

        asyncio.run(node._step(PARTITION, 1_000 + every))
        assert asked == ["Read", "Read"]
        with pytest.raises(NotOwner) as raised:
            node.require_owner(PARTITION)
        assert raised.value.owner == "n2" and raised.value.address == "127.0.0.1:7002"
