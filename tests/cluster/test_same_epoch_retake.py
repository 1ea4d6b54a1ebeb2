"""A partition given up and taken anew by the same node under the same lease (a renewal
refused because an unanswered one had landed, its own lease read back: cluster/node.py
`_step`). Two appenders of one epoch then write to one stream, and what the first still
has in flight must neither land after the second takeover read the log nor make the
second's records look stored when they are not. Network-cut runs lost acknowledged
timers this way: the second appender's record ids (`<epoch>.<n>`) repeated the first's,
JetStream answered them as duplicates of the first's records, with the first's sequence,
and stored nothing, so the sends were answered OK and gone at the next takeover.

Against a real three-server JetStream cluster (helpers.nats), with the product's own
`marker_step`, `PartitionLog` and `Appender`; and, without NATS, the node's reaction to a
refused append of an appender that is no longer the partition's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import nats
import pytest
from helpers.engines import T0, engine_factory
from helpers.nats import NatsCluster
from nats.js import errors as js_errors

from timerwheel.cluster import journal
from timerwheel.cluster.appender import Appender, monotonic_ms
from timerwheel.cluster.fencing import EpochMarker, MarkerStep, marker_step
from timerwheel.cluster.lease import Held, LeaseView
from timerwheel.cluster.nats_io import Fenced, PartitionLog, placed, retry_new
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.settings import NodeSettings
from timerwheel.wheels.clock import VirtualClock

PARTITION = 3
EPOCH = 41
HOLDER = "n1/abcd"


@pytest.fixture
def cluster(tmp_path) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path / "nats") as started:
        yield started


def sent(n: int) -> list[journal.Entry]:
    return [journal.Sent(f"m{n}", "orders", f"body {n}".encode(), {}, 10_000 + n)]


async def take(log: PartitionLog) -> int:
    """The marker step of a takeover by HOLDER under EPOCH (cluster/takeover.py)."""
    last_seq, last = await log.last_marker()
    assert marker_step(EPOCH, HOLDER, last) is MarkerStep.WRITE
    written = await retry_new(lambda: log.write_marker(EpochMarker(EPOCH, HOLDER), last_seq))
    assert written is not None
    return written


def appender(log: PartitionLog, marker: int, fenced: list[Appender]) -> Appender:
    far = monotonic_ms() + 600_000
    loop = asyncio.get_running_loop()
    return Appender(log, EPOCH, marker, loop, lambda: far, monotonic_ms, fenced.append)


async def logged_ids(log: PartitionLog) -> list[str]:
    """The ids of the sends in the log, in order (a read the stream's leader could not
    serve for a moment, 503, is asked again: a just-made R3 stream may say so)."""
    for attempt in range(50):
        try:
            through = await log.last_sequence()
            records = await log.read_log(0, through)
            break
        except js_errors.ServiceUnavailableError:
            if attempt == 49:
                raise
            await asyncio.sleep(0.1)
    return [
        entry.message_id
        for _, data in records
        if (entries := journal.decode(data))
        for entry in entries
        if isinstance(entry, journal.Sent)
    ]


@pytest.mark.system
@pytest.mark.timeout(180)
def test_a_retake_under_the_same_lease_stores_every_record_and_fences_the_first(cluster):
    async def check() -> None:
        nc = await nats.connect(servers=cluster.urls, connect_timeout=2)
        try:
            log = PartitionLog(nc.jetstream(timeout=10), PARTITION, 3)
            await placed(log.ensure)
            fenced: list[Appender] = []

            first = appender(log, await take(log), fenced)
            for n in (1, 2, 3):
                await asyncio.wrap_future(first.submit(sent(n)))

            # given up and taken anew, same epoch, same holder: a new marker, a new appender
            second = appender(log, await take(log), fenced)
            sequences = [await asyncio.wrap_future(second.submit(sent(n))) for n in (4, 5, 6)]
            assert len(set(sequences)) == 3
            assert await logged_ids(log) == ["m1", "m2", "m3", "m4", "m5", "m6"]

            # the first takeover's appender, with a record still to publish, is refused
            with pytest.raises(Fenced):
                await asyncio.wrap_future(first.submit(sent(7)))
            assert fenced == [first]
            assert "m7" not in await logged_ids(log)
            for each in (first, second):
                each.close()
                await each.drained()
        finally:
            await nc.close()

    asyncio.run(asyncio.wait_for(check(), 120))


class _Log:
    partition = PARTITION


class _Appender:
    def __init__(self) -> None:
        self.log, self.epoch = _Log(), EPOCH


def test_a_refused_append_of_an_earlier_appender_leaves_the_partition_owned(tmp_path):
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        node = ClusterNode(NodeSettings("n1", ("nats://127.0.0.1:1",), 4), make())
        held = Held(epoch=EPOCH, revision=7, renewed_at_ms=0, marker_sequence=9)
        node._views = {p: LeaseView(p, node.holder, node.node.lease) for p in range(4)}
        node._views[PARTITION] = LeaseView(PARTITION, node.holder, node.node.lease, held=held)
        earlier, current = _Appender(), _Appender()
        node._owned[PARTITION] = current  # type: ignore[assignment]

        node._fenced(earlier)  # type: ignore[arg-type]
        assert node._views[PARTITION].held == held

        node._fenced(current)  # type: ignore[arg-type]
        assert node._views[PARTITION].held is None
