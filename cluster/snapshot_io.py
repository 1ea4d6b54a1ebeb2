"""A partition's snapshots in JetStream: the object store that holds them, the fenced
pointer on `tw.p<N>.snap`, the purge of the log below it, and the two things a node does
with them (docs/cluster.md, "The bounded log"; decision 0011):

- `load`: the latest snapshot, checked against its pointer (`SnapshotInvalid` if missing
  or not matching), for a takeover to replay the log above it;
- `take`: the latest snapshot plus the log above it, folded into a new snapshot through
  the stream's last sequence S, stored as object `p<N>/<S>`, its pointer published under
  the owner's epoch marker (a deposed owner's pointer is refused like its appends), then
  the log purged below S and the previous object deleted.

Purging only below a published pointer's S is safe whoever does it and whenever:
everything below S is in that pointer's object. A takeover reads the pointer after its
own marker is in, so no older owner can publish a newer pointer (or purge past it) while
it replays; it checks the pointer again after the replay all the same (`SnapshotMoved`).
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from dataclasses import dataclass

from nats.js import JetStreamContext
from nats.js import errors as js_errors
from nats.js.api import ObjectStoreConfig, StorageType
from nats.js.object_store import ObjectStore

from timerwheel.cluster import journal, snapshot
from timerwheel.cluster.fencing import fencing_headers
from timerwheel.cluster.nats_io import (
    Fenced,
    PartitionLog,
    _wrong_last_sequence,
    placed,
    retry_new,
)
from timerwheel.cluster.snapshot import Pointer, SnapshotInvalid

# JetStream's "wrong last sequence" with no sequence: another message asserting the same
# subject's last sequence is in process (pinned: tests/cluster/test_snapshots.py)
IN_FLIGHT = 10164
OBJECT_TIMEOUT_S = 120.0  # one object's put or get at most (a snapshot of 256 MiB of log)


class SnapshotMoved(Exception):
    """A newer pointer was published while a takeover replayed: it starts again."""


async def snapshot_store(js: JetStreamContext, replicas: int) -> ObjectStore:
    """The object store of every partition's snapshots: file storage, replicated as the
    partitions' streams are."""
    config = ObjectStoreConfig(
        replicas=replicas, storage=StorageType.FILE,
        description="timerwheel partition snapshots (docs/cluster.md)",
    )  # fmt: skip
    return await placed(lambda: js.create_object_store(snapshot.BUCKET, config=config))


@dataclass
class Rebuilt:
    """A partition's live timers as a takeover found them."""

    fold: journal.Fold  # `records`: the log records folded above its snapshot
    pointer: Pointer | None
    through: int  # the stream sequence replayed through
    replayed: int  # log records the takeover read and folded (above the standby's or S)
    replayed_bytes: int
    standby_through: int = 0  # the warm standby's sequence it started from (0: none)


@dataclass
class Taken:
    pointer: Pointer
    records: int  # log records folded into it on top of the previous snapshot
    seconds: float


def fold_records(fold: journal.Fold, records: list[tuple[int, bytes]]) -> journal.Fold:
    for _, data in records:
        fold.apply(journal.decode(data))
    return fold


class PartitionSnapshots:
    def __init__(self, log: PartitionLog, store: ObjectStore) -> None:
        self.log = log
        self.store = store
        self.partition = log.partition
        self.subject = snapshot.snap_subject(log.partition)

    async def last_pointer(self) -> tuple[int, Pointer | None]:
        """The latest pointer's stream sequence and value; (0, None) before the first."""
        try:
            found = await retry_new(lambda: self.log.js.get_last_msg(self.log.stream, self.subject))
        except js_errors.NotFoundError:
            return 0, None
        return int(found.seq or 0), Pointer.decode(found.data or b"")

    async def load(self) -> tuple[journal.Fold, Pointer | None]:
        """The latest snapshot's fold (empty before the first). Raises SnapshotInvalid."""
        _, pointer = await self.last_pointer()
        if pointer is None:
            return journal.Fold(), None
        sink = io.BytesIO()
        try:
            await asyncio.wait_for(self.store.get(pointer.object, writeinto=sink), OBJECT_TIMEOUT_S)
        except (js_errors.ObjectNotFoundError, js_errors.ObjectDeletedError) as error:
            raise SnapshotInvalid(
                f"partition {self.partition}: snapshot {pointer.object} named by the pointer "
                f"through {pointer.through} is not in the object store ({error!r})"
            ) from error
        except (js_errors.DigestMismatchError, js_errors.BadObjectMetaError) as error:
            raise SnapshotInvalid(
                f"partition {self.partition}: snapshot {pointer.object} is damaged ({error!r})"
            ) from error
        data = sink.getvalue()
        loop = asyncio.get_running_loop()
        fold = await loop.run_in_executor(None, snapshot.decode, self.partition, pointer, data)
        return fold, pointer

    async def rebuild(self, standby: tuple[journal.Fold, int] | None = None) -> Rebuilt:
        """What a takeover restores: the warm standby's fold through its sequence when one
        is given and no snapshot is newer, else the latest snapshot; and the log above it
        replayed through the stream's last sequence now."""
        _, pointer = await self.last_pointer()
        if standby is not None and (pointer is None or pointer.through <= standby[1]):
            fold, after = standby
        else:
            standby = None
            fold, pointer = await self.load()
            after = pointer.through if pointer is not None else 0
        through = await self.log.last_sequence()
        records = await self.log.read_log(after, through)
        loop = asyncio.get_running_loop()
        fold = await loop.run_in_executor(None, fold_records, fold, records)
        _, now = await self.last_pointer()
        if now != pointer:
            raise SnapshotMoved(f"partition {self.partition}: a snapshot was taken meanwhile")
        replayed = sum(len(data) for _, data in records)
        return Rebuilt(
            fold, pointer, through, len(records), replayed, standby[1] if standby else 0
        )  # fmt: skip

    async def take(self, epoch: int, marker_sequence: int) -> Taken:
        """A new snapshot through the stream's last sequence (see the module docstring).
        Raises Fenced when a newer epoch's marker is in."""
        started = time.monotonic()
        fold, previous = await self.load()
        after = previous.through if previous is not None else 0
        through = await self.log.last_sequence()
        records = await self.log.read_log(after, through)
        loop = asyncio.get_running_loop()
        fold = await loop.run_in_executor(None, fold_records, fold, records)
        data = await loop.run_in_executor(None, snapshot.encode, self.partition, through, fold)
        name = snapshot.object_name(self.partition, through)
        await asyncio.wait_for(self.store.put(name, data), OBJECT_TIMEOUT_S)
        pointer = Pointer(through, name, snapshot.digest(data), len(data), len(fold.live), epoch)
        await self._publish(pointer, marker_sequence)
        await self.purge_below(through)
        if previous is not None and previous.object != name:
            with contextlib.suppress(Exception):  # a leftover costs space only
                await self.store.delete(previous.object)
        return Taken(pointer, len(records), time.monotonic() - started)

    async def _publish(self, pointer: Pointer, marker_sequence: int) -> None:
        headers = {
            **fencing_headers(self.log.epoch_subject, marker_sequence),
            "Nats-Msg-Id": f"snap.{pointer.epoch}.{pointer.through}",
        }
        for attempt in range(1, 100):
            try:
                await self.log.js.publish(self.subject, pointer.encode(), headers=headers)
                return
            except js_errors.APIError as error:
                # 10164: an append asserting the same epoch subject is in flight (the owner's
                # appender): not a refusal yet. Asked again until it is taken or 10071 says
                # a newer marker is in (the same Nats-Msg-Id: stored once).
                if error.err_code == IN_FLIGHT and attempt < 99:
                    await asyncio.sleep(0.02)
                    continue
                actual = _wrong_last_sequence(error)
                if actual is not None:
                    raise Fenced(actual) from error
                raise

    async def purge_below(self, through: int) -> None:
        """Drop the log's records with stream sequence <= `through` (they are in the
        snapshot) and every pointer but the latest; epoch markers stay."""
        js = self.log.js
        await js.purge_stream(self.log.stream, seq=through + 1, subject=self.log.log_subject)
        await js.purge_stream(self.log.stream, subject=self.subject, keep=1)
