"""The NATS side of a node: one connection, the lease bucket, the node registry and each
partition's stream, behind blocking calls (docs/cluster.md, "The picture").

nats-py is asyncio; the node's callers are threads (gRPC handlers, the delivery hub, the
lease loop). `LoopThread` runs one event loop in a thread of its own and every call here
is a coroutine run on it with a bound: a call that cannot be answered in time raises
`TimeoutError`, which the lease logic folds in as "unanswered" and the log as "not in
the log yet" (never as a refusal).

What each piece is pinned to (tests/cluster/test_nats_semantics.py): a refused
compare-and-set or expectation is `KeyWrongLastSequenceError` / err_code 10071; a TTL
expiry leaves a value-less limit marker that `create` cannot write over, so `NatsLeaseStore`
treats a value-less entry as an absent key and acquires over it with `update`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any, TypeVar

import nats
from nats.js import JetStreamContext
from nats.js import errors as js_errors
from nats.js.api import (
    AckPolicy,
    ConsumerConfig,
    DeliverPolicy,
    KeyValueConfig,
    StorageType,
    StreamConfig,
)
from nats.js.kv import KeyValue

from timerwheel.cluster.fencing import (
    WRONG_LAST_SEQUENCE,
    EpochMarker,
    fencing_headers,
    marker_headers,
)
from timerwheel.cluster.lease import LeaseEntry, LeaseValue
from timerwheel.cluster.log_tail import LogTail
from timerwheel.cluster.nats_connect import NatsRefused as NatsRefused
from timerwheel.cluster.nats_connect import connect as connect
from timerwheel.cluster.partitions import epoch_subject, log_subject, stream_name

T = TypeVar("T")

LEASE_BUCKET = "timerwheel-leases"
NODE_BUCKET = "timerwheel-nodes"
CONFIG_BUCKET = "timerwheel-config"
DUPLICATE_WINDOW_S = 120.0  # a retried append (same Nats-Msg-Id) is stored once


class Fenced(Exception):
    """An append refused because a newer epoch's marker is on the epoch subject."""

    def __init__(self, actual_marker_sequence: int) -> None:
        super().__init__(f"fenced: the epoch subject's last sequence is {actual_marker_sequence}")
        self.actual_marker_sequence = actual_marker_sequence


class LoopThread:
    """One asyncio event loop in a daemon thread; `run` carries a coroutine out on it."""

    def __init__(self, name: str = "nats-loop") -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._thread.start()

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def run(self, coroutine: Coroutine[Any, Any, T], timeout_s: float) -> T:
        """The coroutine's result, or TimeoutError after `timeout_s` (the coroutine is
        cancelled then)."""
        future = asyncio.run_coroutine_threadsafe(asyncio.wait_for(coroutine, timeout_s), self.loop)
        try:
            return future.result(timeout_s + 1.0)
        except TimeoutError as error:
            future.cancel()
            raise TimeoutError(f"no answer from NATS in {timeout_s} s") from error

    def submit(self, coroutine: Coroutine[Any, Any, T]):
        """Start the coroutine on the loop; the concurrent future of its result."""
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop)

    def close(self) -> None:
        if self.loop.is_closed():
            return

        async def _cancel_all() -> None:
            tasks = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_all(), self.loop).result(5.0)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self.loop.close()


async def retry_new(attempt: Callable[[], Awaitable[T]], bound_s: float = 10.0) -> T:
    """`attempt()` once a just-made stream or bucket answers (for a moment after it is
    made its subjects may have no responder)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        try:
            return await attempt()
        except (js_errors.NoStreamResponseError, nats.errors.NoRespondersError):
            if loop.time() > deadline:
                raise
            await asyncio.sleep(0.05)


NO_PLACEMENT = 10005  # JetStream: "no suitable peers for placement, peer offline"


async def placed(attempt: Callable[[], Awaitable[T]], bound_s: float = 30.0) -> T:
    """`attempt()` (making a replicated stream or bucket) once the meta leader sees enough
    peers: right after the servers form a cluster, or under load, it may call one offline
    for a moment and refuse the placement. Any other refusal is raised at once."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        try:
            return await attempt()
        except js_errors.BadRequestError as error:
            if error.err_code != NO_PLACEMENT or loop.time() > deadline:
                raise
            await asyncio.sleep(0.2)


@dataclass
class ClusterConfig:
    """What every node must agree on, stored once in the config bucket by the first node."""

    partitions: int
    replicas: int


async def agree_config(js: JetStreamContext, wanted: ClusterConfig) -> ClusterConfig:
    """The cluster's config: the stored one if any (a node started with other values is
    refused by the caller), else `wanted`, stored."""
    config = KeyValueConfig(
        bucket=CONFIG_BUCKET, history=1, replicas=wanted.replicas, storage=StorageType.FILE
    )
    kv = await placed(lambda: js.create_key_value(config))
    data = json.dumps({"partitions": wanted.partitions, "replicas": wanted.replicas}).encode()
    try:
        await retry_new(lambda: kv.create("cluster", data))
        return wanted
    except js_errors.KeyWrongLastSequenceError:
        stored = await read_landed(kv, "cluster")
        fields = json.loads(stored)
        return ClusterConfig(int(fields["partitions"]), int(fields["replicas"]))


async def read_landed(kv: KeyValue, key: str, bound_s: float = 10.0) -> bytes:
    """The value of a key the bucket has just said exists (a create over it was refused):
    a bucket's reads are direct gets that any replica may answer, and one that has not yet
    applied the write answers "not found" for a moment."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + bound_s
    while True:
        try:
            entry = await kv.get(key)
            if entry.value:
                return entry.value
        except js_errors.KeyNotFoundError:
            pass
        if loop.time() > deadline:
            raise LookupError(f"{key!r} is in the bucket but no replica returned it in {bound_s} s")
        await asyncio.sleep(0.05)


async def lease_bucket(js: JetStreamContext, ttl_ms: int, replicas: int) -> KeyValue:
    """The lease bucket: TTL the lease's, limit markers so a watcher sees an expiry."""
    config = KeyValueConfig(
        bucket=LEASE_BUCKET, history=1, ttl=ttl_ms / 1000, limit_marker_ttl=ttl_ms / 1000,
        replicas=replicas, storage=StorageType.FILE,
    )  # fmt: skip
    return await placed(lambda: js.create_key_value(config))


async def node_bucket(js: JetStreamContext, ttl_ms: int, replicas: int) -> KeyValue:
    """Who is alive: each node puts its name and address every renewal; the TTL drops it."""
    config = KeyValueConfig(
        bucket=NODE_BUCKET, history=1, ttl=ttl_ms / 1000, replicas=replicas,
        storage=StorageType.FILE,
    )  # fmt: skip
    return await placed(lambda: js.create_key_value(config))


class NatsLeaseStore:
    """`timerwheel.cluster.lease.LeaseStore` over the lease bucket, each call bounded."""

    def __init__(self, loop: LoopThread, kv: KeyValue, timeout_s: float) -> None:
        self._loop = loop
        self._kv = kv
        self._timeout_s = timeout_s

    async def get_async(self, key: str) -> tuple[LeaseEntry | None, int]:
        """The live entry (None if absent, deleted or expired) and the key's last revision
        (0 if it never had one): a create over a marker must assert it."""
        try:
            entry = await self._kv.get(key)
        except js_errors.KeyNotFoundError as error:
            revision = getattr(getattr(error, "entry", None), "revision", None) or 0
            return None, int(revision)
        if entry.value is None or entry.operation in ("DEL", "PURGE") or not entry.value:
            return None, int(entry.revision or 0)
        return LeaseEntry(LeaseValue.decode(entry.value), int(entry.revision or 0)), 0

    def get(self, key: str) -> LeaseEntry | None:
        return self._loop.run(self.get_async(key), self._timeout_s)[0]

    async def create_async(self, key: str, value: LeaseValue) -> int | None:
        try:
            return int(await self._kv.create(key, value.encode()))
        except js_errors.KeyWrongLastSequenceError:
            live, marker_revision = await self.get_async(key)
            if live is not None or not marker_revision:
                return None
            try:  # over a delete or expiry marker: assert it, so only one creator wins
                return int(await self._kv.update(key, value.encode(), last=marker_revision))
            except js_errors.KeyWrongLastSequenceError:
                return None

    def create(self, key: str, value: LeaseValue) -> int | None:
        return self._loop.run(self.create_async(key, value), self._timeout_s)

    async def update_async(self, key: str, value: LeaseValue, expected_revision: int) -> int | None:
        try:
            return int(await self._kv.update(key, value.encode(), last=expected_revision))
        except js_errors.KeyWrongLastSequenceError:
            return None

    def update(self, key: str, value: LeaseValue, expected_revision: int) -> int | None:
        return self._loop.run(self.update_async(key, value, expected_revision), self._timeout_s)

    async def delete_async(self, key: str, expected_revision: int) -> bool:
        try:
            await self._kv.delete(key, last=expected_revision)
            return True
        except js_errors.KeyWrongLastSequenceError:
            return False

    def delete(self, key: str, expected_revision: int) -> bool:
        return self._loop.run(self.delete_async(key, expected_revision), self._timeout_s)


def _wrong_last_sequence(error: js_errors.APIError) -> int | None:
    """The actual last sequence a 10071 refusal names, or None for any other error."""
    if getattr(error, "err_code", None) != WRONG_LAST_SEQUENCE:
        return None
    description = str(getattr(error, "description", "") or "")
    try:
        return int(description.rsplit(":", 1)[1])
    except (IndexError, ValueError):
        return -1


class PartitionLog:
    """One partition's stream: its epoch markers and its log (coroutines on the node's
    loop; the node calls them through `LoopThread`)."""

    def __init__(self, js: JetStreamContext, partition: int, replicas: int) -> None:
        self.js = js
        self.partition = partition
        self.replicas = replicas
        self.stream = stream_name(partition)
        self.log_subject = log_subject(partition)
        self.epoch_subject = epoch_subject(partition)

    async def ensure(self) -> None:
        config = StreamConfig(
            name=self.stream, subjects=[f"tw.p{self.partition}.>"], num_replicas=self.replicas,
            storage=StorageType.FILE, duplicate_window=DUPLICATE_WINDOW_S,
        )  # fmt: skip
        # A refusal other than a placement's: it exists (made by another node). A refused
        # placement is retried: swallowed, it would leave the partition without a log, its
        # lease held and renewed here and no takeover ever finishing.
        try:
            await placed(lambda: self.js.add_stream(config))
        except js_errors.BadRequestError as error:
            if error.err_code == NO_PLACEMENT:
                raise

    async def last_marker(self) -> tuple[int, EpochMarker | None]:
        try:
            found = await retry_new(lambda: self.js.get_last_msg(self.stream, self.epoch_subject))
        except js_errors.NotFoundError:
            return 0, None
        return int(found.seq or 0), EpochMarker.decode(found.data or b"{}")

    async def write_marker(self, marker: EpochMarker, expected_last: int) -> int | None:
        """The marker's sequence, or None when another marker got there first."""
        try:
            ack = await self.js.publish(
                self.epoch_subject, marker.encode(), headers=marker_headers(expected_last)
            )
        except js_errors.APIError as error:
            if _wrong_last_sequence(error) is not None:
                return None
            raise
        return int(ack.seq)

    async def append(self, data: bytes, marker_sequence: int, msg_id: str) -> tuple[int, bool]:
        """Append one record under the epoch whose marker is at `marker_sequence`: its
        stream sequence, and whether the stream answered it as a duplicate of `msg_id`
        (stored before, not again). Raises Fenced when a newer marker is there."""
        headers = {**fencing_headers(self.epoch_subject, marker_sequence), "Nats-Msg-Id": msg_id}
        try:
            ack = await self.js.publish(self.log_subject, data, headers=headers)
        except js_errors.APIError as error:
            actual = _wrong_last_sequence(error)
            if actual is not None:
                raise Fenced(actual) from error
            raise
        return int(ack.seq), bool(ack.duplicate)

    async def last_sequence(self) -> int:
        info = await self.js.stream_info(self.stream)
        return int(info.state.last_seq or 0)

    async def tail(self, after: int) -> LogTail:
        """The log above `after`, read on from call to call through one consumer (a warm
        standby's; `timerwheel.cluster.log_tail`)."""
        return await LogTail(self, after).open()

    async def read_log(self, after: int, through: int) -> list[tuple[int, bytes]]:
        """The log's records with stream sequence in (after, through], in order, through
        a consumer made for this read (a takeover's or a snapshot's: one read)."""
        if through <= after:
            return []
        config = ConsumerConfig(
            deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=after + 1,
            ack_policy=AckPolicy.NONE, filter_subject=f"tw.p{self.partition}.>",
            inactive_threshold=30.0,
        )  # fmt: skip
        subscription = await self.js.pull_subscribe(
            f"tw.p{self.partition}.>", stream=self.stream, config=config
        )
        records: list[tuple[int, bytes]] = []
        try:
            while True:
                batch = await subscription.fetch(512, timeout=5)
                for message in batch:
                    sequence = int(message.metadata.sequence.stream)
                    if message.subject == self.log_subject and sequence <= through:
                        records.append((sequence, message.data))
                    if sequence >= through:
                        return records
        finally:
            await subscription.unsubscribe()
            with contextlib.suppress(Exception):  # else it stays until its inactive threshold
                await self.js.delete_consumer(self.stream, str(config.name))
