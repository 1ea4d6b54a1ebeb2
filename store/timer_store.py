"""Timer operations on RocksDB: reads for anyone, staged writes for the one writer.

Reads (`get`, `find_wheel`, `list_pending`, `read_ready`, `scan`) run on any thread and
see committed data. Writes are staged into a `StagedBatch` by the single writer thread
and committed as one atomic WriteBatch (group commit); see `store.batch` for how a
batch holds its writes and why it hands them to RocksDB sorted.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from heapq import merge
from itertools import islice

from rocksdict import ReadOptions

from store import integrity, keys, records
from store.batch import StagedBatch
from store.rocks import RocksDatabase
from store.trace import TraceLog, cascaded_event, encode_event
from wheels.domain import FiredTimer, State, StoreUnavailable, Timer
from wheels.scheduler import SchedulerState
from wheels.trace import TraceEvent, TraceKind
from wheels.wheel import LEVELS

WheelEntry = tuple[bytes, bytes]  # (wheel key, topic)
_BUCKET_MS = keys.COUNT_BUCKET_MS
_FINAL_STATES = (State.ACKED, State.CANCELLED)
LIST_READ_CHUNK = 16  # records per multi-get (List, fired reads): 64 MiB at most of 4 MiB bodies


class _ClosedFamily:
    """Stands for every column family while the database is closed or reopening."""

    def __getattr__(self, name: str):
        raise StoreUnavailable(f"the store is being reopened ({name}); retry")

    def __getitem__(self, key: bytes):
        raise StoreUnavailable("the store is being reopened; retry")


@dataclass(frozen=True)
class PendingPage:
    timers: list[Timer]
    next_after: bytes | None  # wheel key to continue after, None at the end of the range


class TimerStore:
    def __init__(self, database: RocksDatabase) -> None:
        self.database = database
        self._bind()

    def _bind(self) -> None:
        """Take the column-family objects of the open database (again, after a reopen)."""
        cf = self.database.families
        self._messages = cf[keys.CF_MESSAGES]
        self._ready = cf[keys.CF_READY]
        self._expiry = cf[keys.CF_EXPIRY]
        self._meta = cf[keys.CF_META]
        self._wheels = {name: cf[family] for name, family in keys.CF_WHEEL.items()}
        self.trace = TraceLog(cf[keys.CF_TRACE], self._meta)

    def _unbind(self) -> None:
        """Drop every column-family object (they hold the LOCK); reads meanwhile raise
        StoreUnavailable, through the closed database's families."""
        closed = _ClosedFamily()
        self._messages = self._ready = self._expiry = self._meta = closed
        self._wheels = {name: closed for name in keys.CF_WHEEL}
        self.trace = closed  # rebuilt by `_bind`: it rereads its sequence from `meta`

    def reopen(self) -> None:
        """Close and reopen the database in this process (see RocksDatabase.reopen); for
        the writer thread only. If the open fails, the store stays closed until a later
        `reopen` succeeds."""
        self._unbind()
        self.database.reopen()
        self._bind()

    def close(self) -> None:
        """Drop every column-family reference, then close the database (releases the LOCK)."""
        self._unbind()
        self.database.close()

    # == reads ==========================================================================
    def get_record(self, message_id: str) -> bytes | None:
        return self._messages.get(message_id.encode())

    def get(self, message_id: str) -> Timer | None:
        raw = self.get_record(message_id)
        return None if raw is None else records.decode_timer(message_id, raw)

    def find_wheel(self, timer: Timer, candidates: Iterable[str]) -> str:
        """Which of the candidate wheels holds the scheduled `timer` ('' if none)."""
        key = keys.wheel_key(timer.deliver_at_ms, timer.message_id)
        for name in candidates:
            if self._wheels[name].get(key) is not None:
                return name
        return ""

    def scan(self, wheel: str, lo: bytes, hi: bytes, limit: int) -> list[WheelEntry]:
        """Up to `limit` (key, topic) entries of `wheel` in [lo, hi), in key order."""
        if hi <= lo:
            return []
        # Hot path (cascades, firing): no generator; the ReadOptions that holds the
        # bound stays referenced until the list is built (see _range).
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(hi)
        items = self._wheels[wheel].items(from_key=lo, read_opt=read_options)
        return list(islice(items, limit))

    def first_key(self, wheel: str, lo: bytes) -> bytes | None:
        for key, _ in self._range(self._wheels[wheel], lo, None):
            return key
        return None

    def list_pending(
        self,
        topic: str,
        from_ms: int,
        to_ms: int,
        limit: int,
        after: bytes | None,
        floors: dict[str, bytes],
        scan_budget: int,
        max_bytes: int = 2**62,
        include_body: bool = True,
    ) -> PendingPage:
        """Scheduled timers of `topic` due in [from_ms, to_ms), across all wheels, by time.

        The three wheels are range-scanned and merged by key. `floors` skip the part of
        each wheel that can hold only tombstones (fired or cascaded keys). At most
        `scan_budget` keys are examined, so a sparse topic cannot pin the server; the
        page then ends early with a continuation key. The page also ends once the timers
        it holds reach `max_bytes` (one timer at least), so a page of big bodies cannot
        take the server's memory; without `include_body` bodies are dropped and not counted.
        """
        lo = keys.time_bound(from_ms)
        if after is not None:
            lo = max(lo, after + b"\x00")
        hi = keys.time_bound(to_ms)
        streams = [
            self._range(self._wheels[name], max(lo, floors.get(name, lo)), hi)
            for name in self._wheels
        ]
        wanted = topic.encode()
        found: list[bytes] = []
        last_key = None
        for examined, (key, entry_topic) in enumerate(merge(*streams)):
            if examined >= scan_budget:
                return self._page(found, last_key, max_bytes, include_body)
            last_key = key
            if entry_topic == wanted:
                found.append(key)
                if len(found) == limit:
                    return self._page(found, key, max_bytes, include_body)
        return self._page(found, None, max_bytes, include_body)

    def _page(
        self, wheel_keys: list[bytes], next_after: bytes | None, max_bytes: int,
        include_body: bool,
    ) -> PendingPage:  # fmt: skip
        """The timers of `wheel_keys`, read a few at a time (a multi-get of a whole page of
        4 MiB bodies would itself be gigabytes) until they hold `max_bytes`."""
        timers: list[Timer] = []
        held = 0
        previous_key = b""  # the last key on the page: where the next page continues
        for start in range(0, len(wheel_keys), LIST_READ_CHUNK):
            chunk = wheel_keys[start : start + LIST_READ_CHUNK]
            ids = [key[keys.TIME_BYTES :] for key in chunk]
            for key, message_id, raw in zip(chunk, ids, self._messages.get(ids), strict=True):
                if raw is None:
                    continue
                timer = records.decode_timer(message_id.decode(), raw)
                size = len(raw) if include_body else len(raw) - len(timer.body)
                if timers and held + size > max_bytes:
                    return PendingPage(timers, previous_key)
                held += size
                timers.append(timer if include_body else replace(timer, body=b""))
                previous_key = key
        return PendingPage(timers, next_after)

    def read_ready(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[FiredTimer]:
        """Fired, un-acked timers of `topic` with fire sequence above `after_seq`."""
        return [
            FiredTimer(seq, records.decode_timer(message_id.decode(), raw))
            for seq, message_id, raw in self.read_ready_raw(topic, after_seq, limit, max_bytes)
        ]

    def read_ready_raw(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[tuple[int, bytes, bytes]]:
        """`read_ready` undecoded: (fire seq, message id, record) in fire order; at most
        `limit` of them and, when `max_bytes` is given, records of about that many bytes
        (the one that reaches it is the last; one at least). Records are read in small
        multi-gets, so a read of big bodies stops at its budget instead of holding them."""
        prefix = keys.ready_prefix(topic)
        entries = list(
            islice(
                self._range(
                    self._ready, keys.ready_key(topic, after_seq + 1), keys.prefix_end(prefix)
                ),
                limit,
            )
        )
        found, held = [], 0
        for start in range(0, len(entries), LIST_READ_CHUNK):
            chunk = entries[start : start + LIST_READ_CHUNK]
            raws = self._messages.get([message_id for _, message_id in chunk])
            for (key, message_id), raw in zip(chunk, raws, strict=True):
                if raw is not None and records.record_state(raw) is State.FIRED:
                    found.append((keys.ready_seq(key), message_id, raw))
                    held += len(raw)
                    if max_bytes and held >= max_bytes:
                        return found
        return found

    def count_ready(self, topic: str) -> int:
        prefix = keys.ready_prefix(topic)
        return sum(1 for _ in self._range(self._ready, prefix, keys.prefix_end(prefix)))

    def ready_topics(self) -> list[str]:
        """Topics that have fired, un-acked timers (for redelivery after a restart)."""
        topics = []
        lo = b""
        while True:
            key = next((k for k, _ in self._range(self._ready, lo, None)), None)
            if key is None:
                return topics
            topic_bytes = key.split(keys.TOPIC_SEPARATOR, 1)[0]
            topics.append(topic_bytes.decode())
            lo = keys.prefix_end(topic_bytes + keys.TOPIC_SEPARATOR)

    def estimate_keys(self, family: str) -> int:
        value = self.database.families[family].property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0)

    def load_state(self) -> SchedulerState | None:
        """The scheduler state persisted by the last commit; None for a new store (every
        column family empty). A store with data whose `meta` is missing, damaged or of
        another schema version raises `store.integrity.StoreDamaged`."""
        if integrity.is_empty(self.database.families):
            return None
        return integrity.decode_state(self.database.path, self._meta)

    @staticmethod
    def _range(family, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Items in [lo, hi), lazily.

        Two rocksdict 0.3.29 traps: `set_iterate_lower_bound` sets the UPPER bound, so the
        lower bound is the start key; and the iterator borrows the upper-bound buffer from
        its ReadOptions without keeping it alive, so the ReadOptions must outlive the
        iteration (it lives in this generator's frame). Returning the bare iterator let
        the bound be freed and scans stopped early (seen in the model test).
        """
        if hi is not None and hi <= lo:
            return
        read_options = ReadOptions()
        if hi is not None:
            read_options.set_iterate_upper_bound(hi)
        yield from family.items(from_key=lo, read_opt=read_options)

    # == staged writes (writer thread only) ============================================
    def lookup(self, batch: StagedBatch, message_id: bytes) -> bytes | None:
        """The record as this batch will leave it."""
        if message_id in batch.records:
            return batch.records[message_id]
        if message_id in batch.prefetched:
            return batch.prefetched[message_id]
        return self._messages.get(message_id)

    def prefetch(self, batch: StagedBatch, message_ids: list[bytes]) -> None:
        """Read the committed records of `message_ids` into the batch, in one multi-get."""
        wanted = [i for i in dict.fromkeys(message_ids) if i not in batch.prefetched]
        if wanted:
            batch.prefetched.update(zip(wanted, self._messages.get(wanted), strict=True))

    def stage_schedule(
        self, batch: StagedBatch, message_id: bytes, record: bytes, deliver_at_ms: int,
        topic: bytes, wheel: str,
    ) -> None:  # fmt: skip
        """A new SCHEDULED timer: its record and its key in `wheel`, atomically."""
        self.stage_schedule_many(batch, [message_id], [record], [deliver_at_ms], [topic], [wheel])

    def stage_schedule_many(
        self, batch: StagedBatch, message_ids: list[bytes], records_: list[bytes],
        deliver_times_ms: list[int], topics: list[bytes], wheels: list[str],
    ) -> None:  # fmt: skip
        """`stage_schedule` for a batch of sends: the hot path of SendBatch."""
        writes, pack_time = batch.writes, keys.U64.pack
        batch.records.update(zip(message_ids, records_, strict=True))
        wheel_writes = {name: writes[family] for name, family in keys.CF_WHEEL.items()}
        deltas, separator, bucket_ms = batch.count_deltas, keys.TOPIC_SEPARATOR, _BUCKET_MS
        for message_id, deliver_at_ms, topic, wheel in zip(
            message_ids, deliver_times_ms, topics, wheels, strict=True
        ):
            time_bytes = pack_time(deliver_at_ms)
            wheel_writes[wheel][time_bytes + message_id] = topic
            bucket = topic + separator + pack_time(deliver_at_ms - deliver_at_ms % bucket_ms)
            deltas[bucket] = deltas.get(bucket, 0) + 1
        batch.operations += len(message_ids)

    def stage_fire_new(
        self, batch: StagedBatch, message_id: bytes, record: bytes, topic: str, seq: int
    ) -> None:
        """A new timer that is already due: stored FIRED with its ready entry, no wheel key."""
        batch.records[message_id] = record
        batch.writes[keys.CF_READY][keys.ready_key(topic, seq)] = message_id
        batch.fired_topics.add(topic)
        batch.fired_entries.setdefault(topic, []).append((seq, message_id, record))
        batch.fired += 1
        batch.operations += 1

    def stage_move(
        self, batch: StagedBatch, upper: str, lower: str, entries: list[WheelEntry], now_ms: int
    ) -> None:
        """Cascade: keys out of `upper`, into `lower`, unchanged; a CASCADED event each."""
        batch.writes[keys.CF_WHEEL[lower]].update(entries)
        batch.writes[keys.CF_WHEEL[upper]].update(dict.fromkeys(key for key, _ in entries))
        event, start = cascaded_event(upper, lower, now_ms), keys.TIME_BYTES
        batch.trace.extend((key[start:], event) for key, _ in entries)
        batch.operations += len(entries)

    def stage_fire(
        self, batch: StagedBatch, wheel: str, entries: list[WheelEntry], first_seq: int, now_ms: int
    ) -> int:
        """Fire wheel entries: key out, `ready` entry in, record FIRED. Returns seqs used."""
        ids = [key[keys.TIME_BYTES :] for key, _ in entries]
        raws = self.lookup_many(batch, ids)
        wheel_writes, ready_writes = batch.writes[keys.CF_WHEEL[wheel]], batch.writes[keys.CF_READY]
        overlay, pack_seq, separator = batch.records, keys.U64.pack, keys.TOPIC_SEPARATOR
        per_topic: dict[bytes, list[tuple[int, bytes, bytes]]] = {}
        deltas, unpack_time = batch.count_deltas, keys.U64.unpack_from
        seq = first_seq
        for (key, topic), message_id, raw in zip(entries, ids, raws, strict=True):
            wheel_writes[key] = None
            if raw is None or not records.is_scheduled(raw):
                continue  # a stale key; cancel removes keys atomically, so this is defensive
            deliver_at_ms = unpack_time(key)[0]
            bucket = topic + separator + pack_seq(deliver_at_ms - deliver_at_ms % _BUCKET_MS)
            deltas[bucket] = deltas.get(bucket, 0) - 1
            if records.is_series(raw):  # fires an occurrence instead (engine.series)
                batch.series_due.append((message_id, raw, topic.decode(), seq))
                seq += 1
                continue
            fired = records.as_fired(raw, now_ms, seq)
            overlay[message_id] = fired
            ready_writes[topic + separator + pack_seq(seq)] = message_id
            fired_of_topic = per_topic.get(topic)
            if fired_of_topic is None:
                fired_of_topic = per_topic[topic] = []
            fired_of_topic.append((seq, message_id, fired))
            seq += 1
        for topic, fired_of_topic in per_topic.items():
            name = topic.decode()
            batch.fired_topics.add(name)
            batch.fired_entries.setdefault(name, []).extend(fired_of_topic)
            if wheel != "second":  # overdue when its cascade came: the trace says where from
                event = encode_event(TraceEvent(TraceKind.FIRED, now_ms, wheel=wheel))
                batch.trace.extend((message_id, event) for _, message_id, _ in fired_of_topic)
        batch.fired += seq - first_seq
        batch.operations += len(entries)
        return seq - first_seq

    def lookup_many(self, batch: StagedBatch, ids: list[bytes]) -> list[bytes | None]:
        """`lookup` for many ids: one multi-get for what is not read yet, overlay on top."""
        if not ids:
            return []
        self.prefetch(batch, [i for i in ids if i not in batch.records])
        overlay, prefetched = batch.records, batch.prefetched
        return [overlay[i] if i in overlay else prefetched[i] for i in ids]

    def stage_cancel(
        self,
        batch: StagedBatch,
        message_id: str,
        raw: bytes,
        wheels: Iterable[str],
        now_ms: int,
        expire_at_ms: int,
    ) -> None:
        """Remove a SCHEDULED timer's wheel key and mark it CANCELLED, atomically."""
        self.stage_unschedule(batch, message_id, raw, wheels)
        cancelled = records.with_transition(raw, State.CANCELLED, cancelled_at_ms=now_ms)
        batch.records[message_id.encode()] = cancelled
        batch.writes[keys.CF_EXPIRY][keys.wheel_key(expire_at_ms, message_id)] = b""
        batch.operations += 1

    def stage_unschedule(
        self, batch: StagedBatch, message_id: str, raw: bytes, wheels: Iterable[str]
    ) -> None:
        """Remove a SCHEDULED timer's wheel key (from each wheel that may hold it) before
        it is scheduled again or replaced; the caller stages its new record and key."""
        deliver_at_ms = records.record_deliver_at_ms(raw)
        key = keys.wheel_key(deliver_at_ms, message_id)
        for wheel in wheels:
            batch.writes[keys.CF_WHEEL[wheel]][key] = None
        bucket, _ = keys.count_keys(records.record_topic(raw).encode(), deliver_at_ms)
        batch.count_deltas[bucket] = batch.count_deltas.get(bucket, 0) - 1

    def stage_ack(
        self, batch: StagedBatch, message_id: str, raw: bytes, now_ms: int, expire_at_ms: int
    ) -> None:
        """Retire a FIRED timer: ready entry out, record ACKED, expiry scheduled."""
        batch.remove_ready(records.record_topic(raw), records.record_ready_seq(raw))
        batch.records[message_id.encode()] = records.as_acked(raw, now_ms)
        batch.writes[keys.CF_EXPIRY][keys.wheel_key(expire_at_ms, message_id)] = b""
        batch.operations += 1

    def stage_sweep(self, batch: StagedBatch, lo: bytes, now_ms: int, limit: int) -> bytes | None:
        """Remove ACKED/CANCELLED records whose retention ended by `now_ms`.

        Returns the key to resume from when `limit` was reached, else None.
        """
        entries = list(islice(self._range(self._expiry, lo, keys.time_bound(now_ms + 1)), limit))
        ids = [key[keys.TIME_BYTES :] for key, _ in entries]
        expiry_writes = batch.writes[keys.CF_EXPIRY]
        for (key, _), message_id, raw in zip(
            entries, ids, self.lookup_many(batch, ids), strict=True
        ):
            expiry_writes[key] = None
            if raw is not None and records.record_state(raw) in _FINAL_STATES:
                batch.records[message_id] = None
                if records.has_extras(raw):
                    batch.writes[keys.CF_EXTRAS][message_id] = None
                self.trace.stage_forget(batch, (message_id,))
        batch.operations += len(entries)
        return entries[-1][0] if len(entries) == limit else None

    def stage_state(self, batch: StagedBatch, state: SchedulerState) -> None:
        meta = batch.writes[keys.CF_META]
        meta[keys.META_SCHEMA_VERSION] = keys.encode_u64(keys.SCHEMA_VERSION)
        meta[keys.META_NOW_MS] = keys.encode_u64(state.now_ms)
        meta[keys.META_FIRE_FROM] = keys.encode_timer_key(state.fire_from)
        meta[keys.META_FIRE_SEQ] = keys.encode_u64(state.fire_seq)
        for lower, cascade in zip(LEVELS, state.cascades, strict=False):
            meta[keys.meta_horizon(lower.name)] = keys.encode_u64(cascade.horizon_ms)
            pending = cascade.pending_from
            meta[keys.meta_pending(lower.name)] = (
                None if pending is None else keys.encode_timer_key(pending)
            )

    def commit(self, batch: StagedBatch) -> None:
        self.trace.stage(batch)
        self.database.write(batch.to_write_batch(self.database.handles))
