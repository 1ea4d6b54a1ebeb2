"""A warm standby's tail of its partition's log (timerwheel.cluster.standby,
timerwheel.cluster.log_tail) against a real three-server JetStream cluster (helpers.nats):

- it reads through ONE consumer kept from round to round (counted on the stream with
  JetStream's consumer list), and folds every record appended across the rounds exactly
  once (log records between the rounds, epoch markers among them);
- a snapshot whose purge took records it had not read makes it load that snapshot (a gap
  in the stream's sequences), through a new consumer, the old one deleted; what it holds
  then is the partition's whole content, each record once;
- a consumer deleted under it (as a NATS restart or its inactive threshold would) is
  replaced at the next round, with no record lost or folded twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import nats
import pytest
from helpers.nats import NatsCluster

from timerwheel.cluster import journal
from timerwheel.cluster.fencing import EpochMarker
from timerwheel.cluster.nats_io import PartitionLog, retry_new
from timerwheel.cluster.snapshot_io import PartitionSnapshots, snapshot_store
from timerwheel.cluster.standby import Standby

pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]

PARTITION = 2


@pytest.fixture
def cluster(tmp_path) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path / "nats") as started:
        yield started


def record(n: int) -> bytes:
    sent = journal.Sent(f"m{n}", "orders", f"body {n}".encode(), {}, 10_000 + n)
    return journal.encode([sent])


class Run:
    """One partition's log over a connection, and a standby whose rounds the test drives."""

    def __init__(self, js, snaps: PartitionSnapshots, marker: int) -> None:
        self.js, self.snaps, self.log, self.marker = js, snaps, snaps.log, marker
        self.sent = 0

    @classmethod
    async def start(cls, urls: list[str]) -> tuple[nats.NATS, Run]:
        nc = await nats.connect(servers=urls)
        js = nc.jetstream()
        log = PartitionLog(js, PARTITION, 3)
        await log.ensure()
        store = await snapshot_store(js, 3)
        marker = await retry_new(lambda: log.write_marker(EpochMarker(1, "owner"), 0))
        assert marker is not None
        return nc, cls(js, PartitionSnapshots(log, store), marker)

    async def append(self, count: int) -> int:
        for _ in range(count):
            self.sent += 1
            await self.log.append(record(self.sent), self.marker, f"r{self.sent}")
        return await self.log.last_sequence()

    async def consumers(self) -> list[str]:
        return sorted(str(info.name) for info in await self.js.consumers_info(self.log.stream))

    def standby(self) -> Standby:
        standby = Standby(self.snaps)
        standby._task.cancel()  # its rounds are driven here, one by one
        return standby


def expected_live(sent: int) -> dict[str, bytes]:
    return {f"m{n}": f"body {n}".encode() for n in range(1, sent + 1)}


def live(standby: Standby) -> dict[str, bytes]:
    assert standby.fold is not None
    return {message_id: sent.body for message_id, sent in standby.fold.live.items()}


def test_one_consumer_across_rounds_and_every_record_folded_once(cluster):
    async def scenario() -> None:
        nc, run = await Run.start(cluster.urls)
        try:
            await run.append(3)
            standby = run.standby()
            names = set()

            async def read_through() -> int:
                assert await standby.round()
                consumers = await run.consumers()
                assert len(consumers) == 1, consumers
                names.update(consumers)
                return standby.through

            for count in (0, 5, 1, 0, 12, 7):
                last = await run.append(count)
                if count == 1:  # a marker among the records: read past, not folded
                    run.marker = await run.log.write_marker(EpochMarker(2, "owner"), run.marker)
                    last = await run.append(2)
                # its consumer may sit on a server a moment behind the one that acked
                await wait_for(read_through, last, "the standby through the last append")
                assert (standby.stream_last, standby.lag) == (last, 0)
            assert len(names) == 1  # the same consumer every round
            assert standby.applied == run.sent == 30
            assert standby.fold is not None and standby.fold.records == run.sent
            assert live(standby) == expected_live(run.sent)
            assert await standby.take() == (standby.fold, last)
            # its consumer is deleted off the takeover's path
            await wait_for(lambda: run.consumers(), [], "the consumer deleted once taken")
        finally:
            await nc.close()

    asyncio.run(scenario())


def test_a_purge_past_what_it_read_makes_it_load_the_snapshot(cluster):
    async def scenario() -> None:
        nc, run = await Run.start(cluster.urls)
        try:
            behind = await run.append(4)
            standby = run.standby()
            await wait_for(round_through(standby), behind, "the standby through the last append")
            first = await run.consumers()
            await run.append(6)
            taken = await run.snaps.take(1, run.marker)  # purges the log through its S
            assert taken.pointer.through > behind
            last = await run.append(3)
            assert await standby.round()  # the gap: the pointer is past what it read
            assert standby.fold is None and standby.through == behind
            assert await run.consumers() == []
            assert await standby.round()  # the snapshot, then the log above it
            await wait_for(round_through(standby), last, "the standby through the last append")
            assert standby.lag == 0
            assert live(standby) == expected_live(run.sent)
            assert standby.applied == 4 + 3  # the 6 purged came in the snapshot
            now = await run.consumers()
            assert len(now) == 1 and now != first
        finally:
            await nc.close()

    asyncio.run(scenario())


def test_a_consumer_deleted_under_it_is_replaced_and_nothing_is_lost(cluster):
    async def scenario() -> None:
        nc, run = await Run.start(cluster.urls)
        try:
            first = await run.append(2)
            standby = run.standby()
            await wait_for(round_through(standby), first, "the standby through the last append")
            (gone,) = await run.consumers()
            await run.js.delete_consumer(run.log.stream, gone)
            last = await run.append(4)
            assert not await standby.round()  # the pull finds no consumer: a failed round
            assert standby.through < last and standby.lag == last - standby.through
            await wait_for(round_through(standby), last, "the standby through the last append")
            assert standby.applied == run.sent == 6
            assert live(standby) == expected_live(run.sent)
            (now,) = await run.consumers()
            assert now != gone
        finally:
            await nc.close()

    asyncio.run(scenario())


def round_through(standby: Standby):
    """One round, then how far the standby is: None for a round that failed (JetStream
    may answer 503 for a moment under load, or a consumer is being replaced), which the
    wait asks again."""

    async def probe() -> int | None:
        return standby.through if await standby.round() else None

    return probe


async def wait_for(probe, wanted, what: str, bound_s: float = 10.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while (found := await probe()) != wanted:
        assert loop.time() < deadline, f"{what}: {found!r}"
        await asyncio.sleep(0.05)
