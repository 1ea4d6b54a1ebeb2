"""A renewal refused because the node's own unanswered renewal had landed (its answer
lost, or still being committed: JetStream's 10164). The read that follows finds the
node's own lease, same epoch, one revision on: the view adopts that write with its
marker (cluster/lease.py, "A refused renewal") and the partition stays owned: its
appender, its timers and its delivery untouched. Giving it up and taking it anew instead
(what 89fe807 did) was safe only with a new marker and fresh record ids, and each such
cycle purged and restored the partition. A refused renewal whose read finds another
holder is the loss. Own lease read back at another epoch (no marker known for it) is
still given up first and taken anew, never a takeover beside the live appender.
No NATS: `ClusterNode._step` over scripted lease answers, and a real engine on RocksDB."""

from __future__ import annotations

import asyncio

from helpers.engines import T0, engine_factory

from timerwheel.cluster.lease import (
    Held,
    LeaseEntry,
    LeaseValue,
    LeaseView,
    Read,
    Renew,
    Verdict,
)
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock

PARTITION = 1
EPOCH = 5


class _Appender:
    closed = False

    def close(self) -> None:
        self.closed = True


def _scripted(node: ClusterNode, now_ms: int, holder: str | None = None, epoch: int = EPOCH):
    """Renewals refused (the key moved on); reads find `holder`'s entry (ours by default),
    one revision on, sent 500 ms ago."""
    asked = []

    async def call(request):
        asked.append(type(request).__name__)
        if isinstance(request, Renew):
            return None
        assert isinstance(request, Read)
        value = LeaseValue(holder or node.holder, epoch, now_ms - 500, node.address)
        return LeaseEntry(value, 8)

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


def test_a_refused_renewal_that_finds_its_own_write_keeps_the_partition(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node, appender, purged = _node(make())
        now_ms = node.node.lease.renew_every_ms + 10
        node._call, asked = _scripted(node, now_ms)  # type: ignore[method-assign]

        asyncio.run(node._step(PARTITION, now_ms))

        assert asked == ["Renew", "Read"]
        view = node._views[PARTITION]
        assert view.held == Held(EPOCH, 8, now_ms - 500, marker_sequence=3)
        assert view.verdict(now_ms) is Verdict.OWN
        assert node._owned[PARTITION] is appender and not appender.closed
        assert purged == [] and PARTITION not in node._taking


def test_a_refused_renewal_that_finds_another_holder_loses_the_partition(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node, appender, purged = _node(make())
        now_ms = node.node.lease.renew_every_ms + 10
        other = "n2/beef"
        node._call, asked = _scripted(node, now_ms, other, EPOCH + 1)  # type: ignore[method-assign]

        asyncio.run(node._step(PARTITION, now_ms))

        assert asked == ["Renew", "Read"]
        assert node._views[PARTITION].held is None
        assert appender.closed and PARTITION not in node._owned and purged == [PARTITION]


def test_its_own_lease_at_another_epoch_is_given_up_then_taken_anew(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node, appender, purged = _node(make())
        now_ms = node.node.lease.renew_every_ms + 10
        node._call, _asked = _scripted(node, now_ms, epoch=EPOCH + 3)  # type: ignore[method-assign]
        started: list[int] = []

        async def take_over(partition: int) -> None:
            started.append(partition)

        node._take_over = take_over  # type: ignore[method-assign]

        async def two_steps() -> None:
            await node._step(PARTITION, now_ms)
            view = node._views[PARTITION]
            assert view.held is not None and view.needs_marker()
            assert appender.closed and PARTITION not in node._owned and purged == [PARTITION]
            assert started == []  # never beside the live appender
            await node._step(PARTITION, now_ms + 1)
            await asyncio.sleep(0)  # let the takeover task run its first step

        asyncio.run(two_steps())
        assert started == [PARTITION] and PARTITION in node._taking
