"""The lease loop outlives whatever one tick raises (cluster/node.py `_lease_loop`): a
failure outside a partition's step (the replication watch, the snapshot schedule, the
standbys, the gate) is logged and the next tick runs, since a loop that ended would renew
no lease and say nothing. No NATS: the node's steps and registry are replaced, the engine
is real."""

from __future__ import annotations

import asyncio

from helpers.engines import T0, engine_factory
from structlog.testing import capture_logs

from timerwheel.cluster.lease import LeaseTerms, LeaseView
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock


class _Registry:
    async def put(self, key: str, value: bytes) -> None:
        return None

    async def keys(self) -> list[str]:
        return ["n1"]


def test_a_tick_that_raises_is_logged_and_the_loop_goes_on(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 2), make())
        node._views = {p: LeaseView(p, node.holder, node.node.lease) for p in range(2)}
        node._nodes_kv = _Registry()  # type: ignore[attr-defined]
        node._snaps = {}
        steps: list[int] = []
        ticks = {"replication": 0}

        async def step(partition: int, now: int) -> None:
            steps.append(partition)
            if len(steps) >= 6:
                node._closing = True  # the third tick is the last

        def replication_tick(now: int, held: object) -> None:
            ticks["replication"] += 1
            if ticks["replication"] == 1:
                raise RuntimeError("replication watch broke")

        kept: list[list[int]] = []
        node._step_safely = step  # type: ignore[method-assign]
        node.standbys.keep = kept.append  # type: ignore[method-assign]
        node.replication.tick = replication_tick  # type: ignore[method-assign]

        with capture_logs() as logs:
            asyncio.run(asyncio.wait_for(node._lease_loop(), 30))

        assert len(steps) == 6  # three ticks of two partitions: the failure ended none
        assert len(kept) == 2  # the second and third ticks ran whole (their steps are tasks)
        failed = [e for e in logs if e["event"] == "cluster_lease_tick_failed"]
        assert len(failed) == 1 and "replication watch broke" in failed[0]["error"]


class _StalledRegistry(_Registry):
    """The registry bucket while NATS elects its leader: the first put answers (a node's
    start), every later one waits for ever."""

    def __init__(self) -> None:
        self.puts = 0

    async def put(self, key: str, value: bytes) -> None:
        self.puts += 1
        if self.puts > 1:
            await asyncio.Event().wait()


def test_a_stalled_registry_holds_no_tick_back(tmp_path):
    """The registry's put and reads run beside the ticks: a put that never returns (its
    bucket's leader being elected) delays no renewal, and no second put starts beside it.
    (Awaited before each tick, as it was, it held every renewal of the node back.)"""
    terms = LeaseTerms(ttl_ms=400, renew_every_ms=100, margin_ms=100)
    settings = NodeSettings("n1", ("nats://127.0.0.1:1",), 2, lease=terms, tick_ms=20)
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(settings, make())
        node._views = {p: LeaseView(p, node.holder, terms) for p in range(2)}
        registry = _StalledRegistry()
        node._nodes_kv = registry  # type: ignore[attr-defined]
        node._snaps = {}
        ticks: list[int] = []

        async def step(partition: int, now: int) -> None:
            if partition == 0:
                ticks.append(now)
            if len(ticks) >= 30:
                node._closing = True

        node._step_safely = step  # type: ignore[method-assign]
        node.standbys.keep = lambda partitions: None  # type: ignore[method-assign]
        asyncio.run(asyncio.wait_for(node._lease_loop(), 30))

    assert len(ticks) == 30  # thirty ticks, through several renewal intervals
    assert ticks[-1] - ticks[0] >= 5 * terms.renew_every_ms
    assert registry.puts == 2  # the start's, and the one still waiting: never two at once


def test_a_step_that_hangs_holds_no_other_partition_back(tmp_path):
    """Each partition's step is a task of its own: partition 0's call waiting out its
    timeout (here: for ever) does not hold partition 1's steps back, and partition 0 gets
    no second step beside the first. (Gathered, as they were, every renewal of the node
    waited for the slowest call: in the fault suite's cut, a read routed to the cut
    server's replica made each tick 2.1 s long and survivors' leases lapsed.)"""
    terms = LeaseTerms(ttl_ms=400, renew_every_ms=100, margin_ms=100)
    settings = NodeSettings("n1", ("nats://127.0.0.1:1",), 2, lease=terms, tick_ms=20)
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(settings, make())
        node._views = {p: LeaseView(p, node.holder, terms) for p in range(2)}
        node._nodes_kv = _Registry()  # type: ignore[attr-defined]
        node._snaps = {}
        started = {0: 0, 1: 0}

        async def step(partition: int, now: int) -> None:
            started[partition] += 1
            if started[1] >= 20:
                node._closing = True
            if partition == 0:
                await asyncio.Event().wait()

        node._step_safely = step  # type: ignore[method-assign]
        node.standbys.keep = lambda partitions: None  # type: ignore[method-assign]

        async def run() -> None:
            await node._lease_loop()
            await node._release_all()  # the stop cancels the step still waiting

        asyncio.run(asyncio.wait_for(run(), 30))

    assert started == {0: 1, 1: 20}
    assert all(step.done() for step in node._stepping.values())
