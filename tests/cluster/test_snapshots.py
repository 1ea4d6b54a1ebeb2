"""Snapshots and the bounded log (docs/cluster.md, "The bounded log"; decision 0011), over a
real three-server JetStream cluster (helpers.nats) and two in-process nodes, each with its
own engine on RocksDB:

- past the threshold the owner snapshots the partition, the log is purged below the
  snapshot's sequence, and a takeover afterwards restores every live timer while
  replaying only the log above the snapshot (fewer records than the threshold);
- a snapshot missing from the object store, or not matching its pointer's digest, makes a
  node refuse the partition (its lease given back, nothing restored) until it is readable;
- a log record this build cannot read (a newer version) makes a node refuse the partition
  the same way, until the record is gone;
- the NATS semantics this rests on: an R3 object store, and a purge by subject and
  sequence that leaves the other subjects alone.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import nats
import pytest
from helpers.nats import NatsCluster
from nats.js import errors as js_errors
from nats.js.api import StorageType, StreamConfig

from timerwheel.cluster import takeover as takeover_module
from timerwheel.cluster.api import ClusterApi
from timerwheel.cluster.fencing import fencing_headers
from timerwheel.cluster.nats_io import PartitionLog, placed, retry_new
from timerwheel.cluster.node import ClusterNode
from timerwheel.cluster.partitions import epoch_subject, log_subject, stream_name
from timerwheel.cluster.settings import NodeSettings, SnapshotTerms
from timerwheel.cluster.snapshot import BUCKET, Pointer, snap_subject
from timerwheel.cluster.snapshot_io import IN_FLIGHT
from timerwheel.engine.engine import Engine
from timerwheel.engine.system_clock import SystemClock
from timerwheel.wheels.domain import NotFound, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

THRESHOLD = 20  # log records above the snapshot that start the next one
OWN_S = 60.0  # a node taking its partition, beside other work on 2 cores
HOUR_MS = 3_600_000


@pytest.fixture
def cluster(tmp_path) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path / "nats") as started:
        yield started


class Nodes:
    """In-process cluster nodes, each over its own engine; all closed on exit."""

    def __init__(self, base: Path, urls: list[str], terms: SnapshotTerms) -> None:
        self.base, self.urls, self.terms = base, urls, terms
        self.started: list[tuple[ClusterNode, Engine]] = []

    def start(self, name: str) -> ClusterNode:
        settings = Settings(data_dir=str(self.base / name), sync_writes=False)
        engine = Engine(settings, SystemClock())
        node = ClusterNode(NodeSettings(name, tuple(self.urls), 1, snapshot=self.terms), engine)
        self.started.append((node, engine))
        node.start(f"127.0.0.1:{7000 + len(self.started)}")
        return node

    def close(self) -> None:
        for node, engine in reversed(self.started):
            node.close()
            engine.close()
        self.started.clear()


@pytest.fixture
def nodes(tmp_path, cluster) -> Iterator[Callable[[SnapshotTerms], Nodes]]:
    made: list[Nodes] = []

    def make(terms: SnapshotTerms) -> Nodes:
        made.append(Nodes(tmp_path, cluster.urls, terms))
        return made[-1]

    yield make
    for each in made:
        each.close()


def wait_for(what: Callable[[], object], bound_s: float, said: str) -> object:
    deadline = time.monotonic() + bound_s
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, f"{said} not within {bound_s} s"
        time.sleep(0.05)


def sends(prefix: str, count: int) -> list[SendSpec]:
    at = int(time.time() * 1000) + HOUR_MS  # nothing fires during the test
    return [
        SendSpec("orders", f"body {prefix}-{n}".encode(), When(WhenKind.DELIVER_AT, at + n),
                 message_id=f"{prefix}-{n}")
        for n in range(count)
    ]  # fmt: skip


def write(
    api: ClusterApi, records: int, cancel_every: int = 4, prefix: str = "r"
) -> tuple[set[str], set[str]]:
    """`records` log records, one after another: sends of three timers each, then every
    `cancel_every`th record a cancel. The ids live and cancelled."""
    live: set[str] = set()
    cancelled: set[str] = set()
    for n in range(records):
        if n % cancel_every == cancel_every - 1 and live:
            victim = sorted(live)[0]
            api.cancel(victim)
            live.discard(victim)
            cancelled.add(victim)
        else:
            batch = sends(f"{prefix}{n}", 3)
            api.send_batch_async(batch).result(10)
            live.update(spec.message_id for spec in batch)
    return live, cancelled


async def with_js(urls: list[str], work: Callable) -> object:
    client = await nats.connect(urls[0], connect_timeout=2, max_reconnect_attempts=0)
    try:
        return await asyncio.wait_for(work(client.jetstream(timeout=10)), 90)
    finally:
        await client.close()


def log_left(urls: list[str]) -> tuple[int, Pointer, int]:
    """The log records left in partition 0's stream, the latest pointer, and the count of
    pointers kept."""

    async def work(js) -> tuple[int, Pointer, int]:
        info = await js.stream_info(stream_name(0), subjects_filter="tw.p0.>")
        subjects = info.state.subjects or {}
        found = await js.get_last_msg(stream_name(0), snap_subject(0))
        pointer = Pointer.decode(found.data)
        return subjects.get(log_subject(0), 0), pointer, subjects.get(snap_subject(0), 0)

    return asyncio.run(with_js(urls, work))  # type: ignore[return-value]


def test_a_snapshot_bounds_the_log_and_a_takeover_replays_above_it(nodes, cluster):
    run = nodes(SnapshotTerms(records=THRESHOLD, bytes=1 << 30, retry_ms=500))
    first = run.start("a")
    wait_for(lambda: first.owned() == [0], OWN_S, "node a owning partition 0")
    api = ClusterApi(first)

    live: set[str] = set()
    cancelled: set[str] = set()
    for round_ in range(1, 4):  # each snapshot on top of the one before
        more, gone = write(api, THRESHOLD + 2, prefix=f"w{round_}")
        live = (live | more) - gone
        cancelled |= gone
        wait_for(lambda n=round_: len(first.snapshots.taken) >= n, 30, f"snapshot {round_}")
    more, gone = write(api, THRESHOLD // 2, prefix="w4")
    live, cancelled = (live | more) - gone, cancelled | gone
    wait_for(lambda: not first.snapshots._running, 30, "the last snapshot job")
    left, pointer, pointers = log_left(cluster.urls)
    print(f"\nsnapshots {[t.pointer.through for _, t in first.snapshots.taken]}, "
          f"log records left {left}, live {pointer.live}")  # fmt: skip
    assert pointers == 1  # older pointers purged
    assert 0 < left < THRESHOLD  # the log below the snapshot is gone

    first.close()  # hands the lease back: the second node takes it at once
    second = run.start("b")
    wait_for(lambda: second.owned() == [0], OWN_S, "node b owning partition 0")
    takeover = second.takeovers[-1]
    print(f"takeover: snapshot through {takeover.snapshot_through} ({takeover.snapshot_live} "
          f"live), records replayed {takeover.records}, live {takeover.live}")  # fmt: skip
    assert takeover.snapshot_through == pointer.through
    assert takeover.records == left < THRESHOLD  # only the log above the snapshot
    assert takeover.live == len(live)
    engine = second.engine
    for message_id in live:
        timer = engine.get(message_id)
        assert timer.topic == "orders" and timer.body == f"body {message_id}".encode()
    for message_id in cancelled:
        with pytest.raises(NotFound):
            engine.get(message_id)


def test_a_warm_standby_replays_only_what_it_lags(nodes, cluster):
    """Node b owns partition 0 (its preferred node); a, the next in its rendezvous order,
    keeps it folded while b appends and snapshots, and replays only what it lags when it
    takes the partition over."""
    run = nodes(SnapshotTerms(records=THRESHOLD, bytes=1 << 30, retry_ms=500))
    owner = run.start("b")
    wait_for(lambda: owner.owned() == [0], OWN_S, "node b owning partition 0")
    standby = run.start("a")
    wait_for(lambda: 0 in standby.standbys.running, OWN_S, "node a standing by for 0")
    api = ClusterApi(owner)
    live: set[str] = set()
    for round_ in range(1, 3):
        more, gone = write(api, THRESHOLD + 2, prefix=f"s{round_}")
        live = (live | more) - gone
        wait_for(lambda n=round_: len(owner.snapshots.taken) >= n, 30, f"snapshot {round_}")
    more, gone = write(api, 5, prefix="s3")
    live = (live | more) - gone
    last = owner.cluster_map()["map"][0]["last_sequence"]
    warm = standby.standbys.running[0]
    wait_for(lambda: warm.through >= last, 30, "the standby through the last record")
    applied = warm.applied

    owner.close()  # a takes it once the grace has passed (b is still registered a moment)
    wait_for(lambda: standby.owned() == [0], OWN_S, "node a owning partition 0")
    takeover = standby.takeovers[-1]
    print(f"\nstandby applied {applied} records; takeover from standby through "
          f"{takeover.standby_through}: records replayed {takeover.records}, live "
          f"{takeover.live}")  # fmt: skip
    assert takeover.standby_through >= last and takeover.records <= 1  # b's last marker
    assert takeover.live == len(live)
    for message_id in live:
        assert standby.engine.get(message_id).body == f"body {message_id}".encode()
    assert not standby.standbys.running  # an owner stands by for nothing of its own


def test_a_missing_or_damaged_snapshot_is_refused_until_readable(nodes, cluster, monkeypatch):
    monkeypatch.setattr(takeover_module, "REFUSED_MS", 1_000)
    run = nodes(SnapshotTerms(records=5, bytes=1 << 30, retry_ms=500))
    first = run.start("a")
    wait_for(lambda: first.owned() == [0], OWN_S, "node a owning partition 0")
    live, _ = write(ClusterApi(first), 12, cancel_every=100)
    wait_for(lambda: first.snapshots.taken, 30, "a snapshot")
    wait_for(lambda: not first.snapshots._running, 30, "the last snapshot job")
    first.close()
    _, pointer, _ = log_left(cluster.urls)

    async def read(js) -> bytes:
        store = await js.object_store(BUCKET)
        return (await store.get(pointer.object)).data

    good = asyncio.run(with_js(cluster.urls, read))

    def change(data: bytes | None) -> None:
        async def work(js) -> None:
            store = await js.object_store(BUCKET)
            if data is None:
                await store.delete(pointer.object)
            else:
                await store.put(pointer.object, data)

        asyncio.run(with_js(cluster.urls, work))

    second = run.start("b")
    for damage, why in ((None, "not in the object store"), (good[:-1] + b"x", "its digest")):
        change(damage)
        second.placement._refused_until.clear()
        wait_for(lambda: 0 in second.placement._refused_until, OWN_S, f"a refusal: {why}")
        time.sleep(3)  # several refusals of REFUSED_MS each: never owned meanwhile
        assert second.owned() == [] and not second.takeovers, why
    change(good)
    wait_for(lambda: second.owned() == [0], OWN_S, "node b owning partition 0 once readable")
    assert second.takeovers[-1].live == len(live)
    assert second.takeovers[-1].snapshot_through == pointer.through


def test_an_r3_object_store_and_a_purge_by_subject_and_sequence(cluster):
    async def check(js) -> None:
        store = await placed(
            lambda: js.create_object_store(BUCKET, replicas=3, storage=StorageType.FILE)
        )
        info = await js.stream_info(f"OBJ_{BUCKET}")
        assert info.config.num_replicas == 3 and info.config.storage == StorageType.FILE
        await store.put("p0/7", b"x" * 300_000)  # several chunks
        other = await nats.connect(cluster.urls[1], connect_timeout=2, max_reconnect_attempts=0)
        try:
            read = await (await other.jetstream(timeout=10).object_store(BUCKET)).get("p0/7")
            assert read.data == b"x" * 300_000
        finally:
            await other.close()
        with pytest.raises(js_errors.ObjectNotFoundError):
            await store.get("p0/8")

        config = StreamConfig(
            name=stream_name(0), subjects=["tw.p0.>"], num_replicas=3, storage=StorageType.FILE
        )
        await placed(lambda: js.add_stream(config))
        order = [log_subject(0), epoch_subject(0), log_subject(0), snap_subject(0)] * 3
        for subject in order:  # sequences 1..12 (the first once the new stream answers)
            await retry_new(lambda subject=subject: js.publish(subject, b"m"))
        # purge the log below sequence 8 (log messages at 1, 3, 5, 7 go; 9, 11 stay)
        assert await js.purge_stream(stream_name(0), seq=8, subject=log_subject(0))
        assert await js.purge_stream(stream_name(0), subject=snap_subject(0), keep=1)
        info = await js.stream_info(stream_name(0), subjects_filter="tw.p0.>")
        assert info.state.subjects == {log_subject(0): 2, epoch_subject(0): 3, snap_subject(0): 1}
        assert info.state.last_seq == 12
        for seq in (1, 3, 5, 7, 4, 8):
            with pytest.raises(js_errors.NotFoundError):
                await js.get_msg(stream_name(0), seq)
        assert (await js.get_msg(stream_name(0), 9)).subject == log_subject(0)
        assert (await js.get_msg(stream_name(0), 2)).subject == epoch_subject(0)
        assert (await js.get_msg(stream_name(0), 12)).subject == snap_subject(0)

    asyncio.run(with_js(cluster.urls, check))


def test_appends_asserting_one_epoch_marker_at_once_are_stored_or_refused_10164(cluster):
    """Several publishes in flight at once, each asserting the epoch subject's last sequence
    (an append and a snapshot pointer): on a replicated stream each is stored or refused
    with 10164 ("wrong last sequence", no sequence: another is in process), and a refused
    one asked again is stored (cluster.snapshot_io retries a pointer on 10164)."""

    async def check(js) -> None:
        config = StreamConfig(
            name=stream_name(1), subjects=["tw.p1.>"], num_replicas=3, storage=StorageType.FILE
        )
        await placed(lambda: js.add_stream(config))
        marker = (await js.publish(epoch_subject(1), b"epoch 1")).seq
        headers = fencing_headers(epoch_subject(1), marker)
        outcomes = await asyncio.gather(
            *(js.publish(log_subject(1), b"r", headers=headers) for _ in range(20)),
            return_exceptions=True,
        )
        refused = [o for o in outcomes if isinstance(o, BaseException)]
        assert all(getattr(o, "err_code", None) == IN_FLIGHT for o in refused), refused
        info = await js.stream_info(stream_name(1), subjects_filter="tw.p1.>")
        assert (info.state.subjects or {})[log_subject(1)] == 20 - len(refused)
        for _ in refused:  # asked again, one at a time: stored
            await js.publish(log_subject(1), b"r", headers=headers)
        print(f"\n20 appends at once: {len(refused)} refused with {IN_FLIGHT}")

    asyncio.run(with_js(cluster.urls, check))


NEWER = json.dumps({"v": 99, "e": [["send", "x", "orders", "", {}, 1, ""]]}).encode()


def test_a_log_record_of_a_newer_version_is_refused_until_gone(nodes, cluster, monkeypatch):
    monkeypatch.setattr(takeover_module, "REFUSED_MS", 1_000)
    run = nodes(SnapshotTerms(records=1_000, bytes=1 << 30, retry_ms=500))
    first = run.start("a")
    wait_for(lambda: first.owned() == [0], OWN_S, "node a owning partition 0")
    live, _ = write(ClusterApi(first), 6, cancel_every=100)
    first.close()

    async def append_newer(js) -> int:
        log = PartitionLog(js, 0, 3)
        marker_sequence, _ = await log.last_marker()
        sequence, _ = await log.append(NEWER, marker_sequence, "newer.1")
        return sequence

    newer_at = asyncio.run(with_js(cluster.urls, append_newer))

    second = run.start("b")
    wait_for(lambda: 0 in second.placement._refused_until, OWN_S, "a refusal")
    first_refusal = second.placement._refused_until[0]
    # given back and left for REFUSED_MS, then taken and refused again: never owned
    wait_for(lambda: second.placement._refused_until[0] > first_refusal, OWN_S, "a second refusal")
    assert second.owned() == [] and not second.takeovers

    async def remove(js) -> None:
        await js.delete_msg(PartitionLog(js, 0, 3).stream, newer_at)

    asyncio.run(with_js(cluster.urls, remove))
    wait_for(lambda: second.owned() == [0], OWN_S, "node b owning partition 0 once readable")
    assert second.takeovers[-1].live == len(live)
