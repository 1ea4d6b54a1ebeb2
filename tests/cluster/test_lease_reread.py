"""A renewal whose answer was lost but which landed makes the next renewal refused; the
read after it finds the node's own lease, same epoch, and adopts it without its marker
(cluster/lease.py `_read`). The node must then give the partition up (close its appender,
purge its rows) and take it over anew, never start a takeover beside the live appender:
that overwrote the appender unclosed and lost acknowledged timers in network-cut runs.
No NATS: `ClusterNode._step` over scripted lease answers, and a real engine on RocksDB."""

from __future__ import annotations

import asyncio

from helpers.engines import T0, engine_factory

from timerwheel.cluster.lease import Held, LeaseEntry, LeaseValue, LeaseView, Read, Renew
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock

PARTITION = 1
EPOCH = 5


class _Appender:
    closed = False

    def close(self) -> None:
        self.closed = True


def _scripted(node: ClusterNode, now_ms: int):
    """Renewals refused (the key moved on: our own unanswered write landed); reads find
    our own entry, one revision on, same epoch."""
    asked = []

    async def call(request):
        asked.append(type(request).__name__)
        if isinstance(request, Renew):
            return None
        assert isinstance(request, Read)
        return LeaseEntry(LeaseValue(node.holder, EPOCH, now_ms - 500, node.address), 8)

    return call, asked


def _node(engine) -> tuple[ClusterNode, _Appender, list[int]]:
    node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 4), engine)
    node._views = {p: LeaseView(p, node.holder, node.node.lease) for p in range(4)}
    held = Held(epoch=EPOCH, revision=7, renewed_at_ms=0, marker_sequence=3)
    node._views[PARTITION] = LeaseView(PARTITION, node.holder, node.node.lease, held=held)
    appender = _Appender()
    node._owned[PARTITION] = appender  # type: ignore[assignment]
    purged: list[int] = []
    node._purge = purged.append  # type: ignore[method-assign]
    return node, appender, purged


def test_a_re_read_own_lease_gives_the_partition_up_before_any_takeover(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node, appender, purged = _node(make())
        now_ms = node.node.lease.renew_every_ms + 10
        node._call, asked = _scripted(node, now_ms)  # type: ignore[method-assign]

        asyncio.run(node._step(PARTITION, now_ms))

        assert asked == ["Renew", "Read"]
        view = node._views[PARTITION]
        assert view.held is not None and view.held.epoch == EPOCH and view.needs_marker()
        assert appender.closed and PARTITION not in node._owned and purged == [PARTITION]
        assert PARTITION not in node._taking  # no takeover beside the old appender


def test_after_giving_it_up_the_next_step_takes_it_over(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node, _appender, _purged = _node(make())
        now_ms = node.node.lease.renew_every_ms + 10
        node._call, _asked = _scripted(node, now_ms)  # type: ignore[method-assign]
        started: list[int] = []

        async def take_over(partition: int) -> None:
            started.append(partition)

        node._take_over = take_over  # type: ignore[method-assign]

        async def two_steps() -> None:
            await node._step(PARTITION, now_ms)
            assert started == []
            await node._step(PARTITION, now_ms + 1)
            await asyncio.sleep(0)  # let the takeover task run its first step

        asyncio.run(two_steps())
        assert started == [PARTITION] and PARTITION in node._taking
