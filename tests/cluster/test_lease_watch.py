"""The lease watch (cluster/lease_watch.py): a lease that expires or is given back is heard
at once, so a standby reads it at its next tick instead of its next interval; renewals are
not acted on; a watch that fails or falls silent is made again. Against a real three-server
JetStream cluster and the product's own lease bucket; the restarts over a scripted bucket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import nats
import nats.errors
import pytest
from helpers.nats import NatsCluster

from timerwheel.cluster.lease_watch import LeaseWatch, partition_of_key
from timerwheel.cluster.nats_io import lease_bucket, retry_new

TEST_S = 30.0


@pytest.fixture
def server(tmp_path) -> Iterator[NatsCluster]:
    with NatsCluster(tmp_path) as started:
        yield started


def test_lease_keys_name_their_partition_and_nothing_else_does():
    assert partition_of_key("p0") == 0 and partition_of_key("p63") == 63
    assert partition_of_key("cluster") is None and partition_of_key("p") is None
    assert partition_of_key("px1") is None


@pytest.mark.system
def test_an_expiry_and_a_give_back_are_heard_and_renewals_are_not(server):
    async def check() -> None:
        client = await nats.connect(server.urls[0], connect_timeout=2, max_reconnect_attempts=0)
        try:
            js = client.jetstream(timeout=5)
            kv = await lease_bucket(js, ttl_ms=1_000, replicas=3)
            heard: asyncio.Queue[int] = asyncio.Queue()
            closing = False
            watch = LeaseWatch(kv, heard.put_nowait, silent_ms=5_000)
            task = asyncio.ensure_future(watch.run(lambda: closing))

            revision = await retry_new(lambda: kv.create("p3", b"n1"))
            for _ in range(3):  # renewals: nothing heard
                revision = await kv.update("p3", b"n1", last=revision)
            renewed_at = time.monotonic()
            # p3 is not renewed again: its TTL (1 s) ends it and the watch hears that; a
            # renewal taken for an end would be heard at once
            assert await asyncio.wait_for(heard.get(), 10) == 3
            assert time.monotonic() - renewed_at >= 0.5, "heard before the TTL could end it"

            made = await kv.create("p5", b"n2")
            await kv.delete("p5", last=made)  # a hand-off or a stop gives it back
            assert await until_heard(heard, 5) <= {3}  # a watch made again re-hears p3's end
            if watch.started == 1:  # (a watch made on the new bucket may be refused once)
                assert heard.empty() and watch.heard == 2

            closing = True
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        finally:
            await client.close()

    asyncio.run(asyncio.wait_for(check(), TEST_S))


async def until_heard(heard: asyncio.Queue[int], partition: int) -> set[int]:
    """The other partitions heard before `partition` is."""
    others = set()
    while (got := await asyncio.wait_for(heard.get(), 10)) != partition:
        others.add(got)
    return others


class _Entry:
    def __init__(self, key: str, operation: str | None) -> None:
        self.key = key
        self.operation = operation


class _Watcher:
    def __init__(self, script: list[object]) -> None:
        self.script = script
        self.stopped = False

    async def updates(self, timeout: float = 5.0) -> object:
        if not self.script:
            raise nats.errors.TimeoutError  # silence
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return step

    async def stop(self) -> None:
        self.stopped = True


class _Bucket:
    """Each watch made answers its script; the first watch call fails."""

    def __init__(self, scripts: list[list[object]]) -> None:
        self.scripts = scripts
        self.calls = 0
        self.watchers: list[_Watcher] = []

    async def watchall(self, **kwargs: object) -> _Watcher:
        self.calls += 1
        if self.calls == 1:
            raise nats.errors.ConnectionClosedError
        watcher = _Watcher(self.scripts.pop(0) if self.scripts else [])
        self.watchers.append(watcher)
        return watcher


def test_a_failed_or_silent_watch_is_made_again_and_keeps_hearing():
    bucket = _Bucket(
        [
            [_Entry("p1", "PURGE"), None],  # then silent: made again
            [_Entry("p2", None), _Entry("p4", "DEL"), RuntimeError("consumer deleted")],
            [_Entry("cluster", "DEL"), _Entry("p6", "PURGE")],
        ]
    )
    heard: list[int] = []

    async def check() -> None:
        watch = LeaseWatch(bucket, heard.append, silent_ms=10)
        await watch.run(lambda: len(heard) >= 3)
        assert watch.started == 3

    asyncio.run(asyncio.wait_for(check(), TEST_S))
    assert heard == [1, 4, 6]
    assert bucket.calls == 4  # a failed call, then three watches
    assert all(w.stopped for w in bucket.watchers)
