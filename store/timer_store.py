"""Timer operations on RocksDB: reads for anyone, staged writes for the one writer.

Reads (`get`, `find_wheel`, `list_pending`, `read_ready_raw`, `scan`) run on any thread and
see committed data; they, and the column families they go through, are `TimerReads`'s
(timerwheel.store.timer_reads). Writes are staged into a `StagedBatch` by the single writer thread
and committed as one atomic WriteBatch (group commit); see `timerwheel.store.batch` for how a
batch holds its writes and why it hands them to RocksDB sorted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from itertools import compress, filterfalse, repeat
from operator import itemgetter

from timerwheel.common import State
from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.range_reads import read_records
from timerwheel.store.timer_reads import TimerReads, WheelEntry
from timerwheel.store.trace import cascaded_event, encode_event
from timerwheel.wheels.scheduler import SchedulerState
from timerwheel.wheels.trace import TraceEvent, TraceKind
from timerwheel.wheels.wheel import LEVELS

_FINAL_STATES = (State.ACKED, State.CANCELLED)
FiredEntry = tuple[int, bytes, bytes]  # (fire seq, message id, its FIRED record)
_SEQ, _ID, _RECORD = itemgetter(0), itemgetter(1), itemgetter(2)


class TimerStore(TimerReads):
    """Every read of `TimerReads`, and the staged writes and commit of the writer thread."""

    def _bind(self) -> None:
        super()._bind()
        # The `meta` values this store committed, which `stage_state` need not stage
        # again; empty at open and after a reopen: the first commit writes them all.
        self._meta_written: dict[bytes, bytes | None] = {}

    # == staged writes (writer thread only) ============================================
    def lookup(self, batch: StagedBatch, message_id: bytes) -> bytes | None:
        """The record as this batch will leave it."""
        if message_id in batch.records:
            return batch.records[message_id]
        if message_id in batch.prefetched:
            return batch.prefetched[message_id]
        return self._messages.get(message_id)

    def prefetch(self, batch: StagedBatch, message_ids: list[bytes]) -> None:
        """Read the committed records of `message_ids` into the batch, all at once
        (timerwheel.store.range_reads: one walk over the neighbours, a multi-get for the rest)."""
        wanted = list(filterfalse(batch.prefetched.__contains__, dict.fromkeys(message_ids)))
        if wanted:
            batch.prefetched.update(read_records(self._messages, wanted))

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
        batch.records.update(zip(message_ids, records_, strict=True))
        wheel_writes = {name: batch.writes[family] for name, family in keys.CF_WHEEL.items()}
        for key, topic, wheel in zip(
            keys.wheel_keys(deliver_times_ms, message_ids), topics, wheels, strict=True
        ):
            wheel_writes[wheel][key] = topic
        deltas = batch.count_deltas
        for bucket, timers in keys.count_bucket_tally(topics, deliver_times_ms).items():
            deltas[bucket] = deltas.get(bucket, 0) + timers
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
        event = cascaded_event(upper, lower, now_ms)
        moved_ids = keys.wheel_key_ids(key for key, _ in entries)
        batch.trace.extend((message_id, event) for message_id in moved_ids)
        batch.operations += len(entries)

    def stage_fire(
        self, batch: StagedBatch, wheel: str, entries: list[WheelEntry], first_seq: int, now_ms: int
    ) -> int:
        """Fire wheel entries: key out, `ready` entry in, record FIRED. Returns seqs used.

        A chunk is most often one topic's plain timers (each record there, SCHEDULED,
        not a series): that is recognised by C-implemented builtins
        (`records.all_plain_scheduled`) and fired with no Python step a timer but its
        record's patch; anything else one by one (`_fire_each`), which sees stale keys and
        series."""
        wheel_keys = [key for key, _ in entries]
        ids = keys.wheel_key_ids(wheel_keys)
        raws = self.lookup_many(batch, ids)
        topics = [topic for _, topic in entries]
        tally = keys.count_bucket_tally(topics, keys.wheel_key_times_ms(wheel_keys))
        batch.writes[keys.CF_WHEEL[wheel]].update(dict.fromkeys(wheel_keys))
        if topics and topics.count(topics[0]) == len(topics) and records.all_plain_scheduled(raws):
            seqs = range(first_seq, first_seq + len(raws))
            fired = map(records.as_fired, raws, repeat(now_ms), seqs)
            per_topic = {topics[0]: list(zip(seqs, ids, fired, strict=True))}
            used = len(raws)
        else:
            per_topic, used = _fire_each(batch, entries, ids, raws, tally, first_seq, now_ms)
        deltas = batch.count_deltas
        for bucket, timers in tally.items():
            deltas[bucket] = deltas.get(bucket, 0) - timers
        ready_writes = batch.writes[keys.CF_READY]
        for topic, fired_of_topic in per_topic.items():
            fired_ids = list(map(_ID, fired_of_topic))
            batch.records.update(zip(fired_ids, map(_RECORD, fired_of_topic), strict=True))
            ready_keys = keys.ready_keys(topic, map(_SEQ, fired_of_topic))
            ready_writes.update(zip(ready_keys, fired_ids, strict=True))
            name = topic.decode()
            batch.fired_topics.add(name)
            batch.fired_entries.setdefault(name, []).extend(fired_of_topic)
            if wheel != "second":  # overdue when its cascade came: the trace says where from
                event = encode_event(TraceEvent(TraceKind.FIRED, now_ms, wheel=wheel))
                batch.trace.extend(zip(fired_ids, repeat(event)))
        batch.fired += used
        batch.operations += len(entries)
        return used

    def lookup_many(self, batch: StagedBatch, ids: list[bytes]) -> list[bytes | None]:
        """`lookup` for many ids: one read (`prefetch`) of what is not read yet, overlay on top."""
        if not ids:
            return []
        overlay, prefetched = batch.records, batch.prefetched
        unstaged = list(filterfalse(overlay.__contains__, ids))
        self.prefetch(batch, unstaged)
        if len(unstaged) == len(ids):  # the usual case: `map` looks each up in C
            return list(map(prefetched.__getitem__, ids))
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
        self.stage_expiry(batch, expire_at_ms, [message_id.encode()])
        batch.operations += 1

    def stage_expiry(self, batch: StagedBatch, expire_at_ms: int, message_ids: list[bytes]) -> None:
        """Remove the final records of `message_ids` (UTF-8, at least one) by a sweep at
        `expire_at_ms`: one `expiry` entry for them all (timerwheel.store.keys.expiry_entry).

        That entry is keyed by the time and the first id, so a client id finished twice in
        one millisecond of the writer's clock (acked, sent again, fired and acked again)
        meets its earlier entry under the same key. The ids that entry names, staged in
        this batch or committed, are kept in the new one: overwritten, they would never be
        swept. A key this batch deletes (a sweep's) names nothing any more.
        """
        key, value = keys.expiry_entry(expire_at_ms, message_ids)
        staged = batch.writes[keys.CF_EXPIRY]
        earlier = staged[key] if key in staged else self._expiry.get(key)
        if earlier is not None:
            kept = dict.fromkeys([*keys.expiry_entry_ids(key, earlier), *message_ids])
            _, value = keys.expiry_entry(expire_at_ms, list(kept))
        staged[key] = value

    def stage_unexpire(self, batch: StagedBatch, expire_at_ms: int, message_id: bytes) -> None:
        """Take `message_id` out of its `expiry` entry at `expire_at_ms` (a final record
        that is live again: a cancelled id sent again with REPLACE), so that entry cannot
        sweep a later version, finished again before then, ahead of its own retention.
        Nothing when there is no such entry (the retention setting changed since)."""
        key, _ = keys.expiry_entry(expire_at_ms, [message_id])
        staged = batch.writes[keys.CF_EXPIRY]
        value = staged[key] if key in staged else self._expiry.get(key)
        if value is None:
            return
        others = [other for other in keys.expiry_entry_ids(key, value) if other != message_id]
        staged[key] = None
        if others:
            self.stage_expiry(batch, expire_at_ms, others)

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

    def stage_acks(
        self, batch: StagedBatch, topic: str, message_ids: list[str], now_ms: int,
        expire_at_ms: int, first_deliveries: Callable[[list[str]], list[bytes]] | None = None,
    ) -> list[str]:  # fmt: skip
        """Retire the FIRED timers of `topic` among `message_ids` (distinct ids; their
        records as this batch leaves them, read in one go): ready entry out, record
        ACKED, expiry scheduled (one `expiry` entry for all of them: timerwheel.store.keys).
        Returns the ids retired; unknown ids, other states and other topics' are skipped.

        The hot path of Ack, with no Python step a message but its record's patch: an Ack
        call's records are nearly always all FIRED on its topic, which is decided by
        C-implemented builtins with no Python step per message (`records.all_fired_in`,
        the topic compared as the record holds it: length and bytes, no decode); only
        otherwise is each one checked and the others left out. The keys are made
        afterwards, many at a time, which saves the Python call a message that making
        them one by one would cost.
        `first_deliveries(acked ids)` gives each acked record's first-delivery trailer
        (b"": none; `records.as_acked`), for the events the delivery hub held for the Ack.
        """
        topic_block = records.topic_block(topic)
        acked, acked_keys = list(message_ids), list(map(str.encode, message_ids))
        raws = self.lookup_many(batch, acked_keys)
        if not records.all_fired_in(raws, topic_block):
            kept = [records.fired_in(raw, topic_block) for raw in raws]
            acked, acked_keys, raws = (list(compress(x, kept)) for x in (acked, acked_keys, raws))
        retired = records.ready_seqs(raws)
        trailers = first_deliveries(acked) if first_deliveries else repeat(b"")
        patched = map(records.as_acked, raws, repeat(now_ms), trailers)
        batch.records.update(zip(acked_keys, patched, strict=True))
        if retired:
            batch.writes[keys.CF_READY].update(
                dict.fromkeys(keys.ready_keys(topic.encode(), retired))
            )
            self.stage_expiry(batch, expire_at_ms, acked_keys)
            batch.retired.setdefault(topic, []).extend(retired)
        batch.operations += len(acked)
        return acked

    def stage_sweep(self, batch: StagedBatch, lo: bytes, now_ms: int, limit: int) -> bytes | None:
        """Remove ACKED/CANCELLED records whose retention ended by `now_ms`: the
        `expiry` entries from `lo` through `now_ms`, whole, until they name `limit` ids
        (an Ack's entry names all it retired, so a chunk may hold a few thousand more).

        Returns the key to resume from when `limit` was reached, else None. A record
        whose id came back meanwhile (a client id sent again) is no longer final: kept.
        """
        expiry_keys: list[bytes] = []
        ids: list[bytes] = []
        for key, value in self._range(self._expiry, lo, keys.time_bound(now_ms + 1)):
            expiry_keys.append(key)
            ids.extend(keys.expiry_entry_ids(key, value))
            if len(ids) >= limit:
                break
        batch.writes[keys.CF_EXPIRY].update(dict.fromkeys(expiry_keys))
        for message_id, raw in zip(ids, self.lookup_many(batch, ids), strict=True):
            if raw is not None and records.record_state(raw) in _FINAL_STATES:
                batch.records[message_id] = None
                if records.has_extras(raw):
                    batch.writes[keys.CF_EXTRAS][message_id] = None
                self.trace.stage_forget(batch, (message_id,))
        batch.operations += len(ids)
        return expiry_keys[-1] if len(ids) >= limit else None

    def stage_state(self, batch: StagedBatch, state: SchedulerState) -> None:
        """Stage the scheduler's state in `meta`: only the values that differ from what
        this store last committed there.

        A group commit changes `now_ms` and, while timers fire, `fire_from` and
        `fire_seq`; the schema version, the cascades' horizons and their pending keys
        stay put for seconds to hours. Staging all eight every commit made `meta` a
        large share of the entries the writer wrote at low send rates, where commits are
        frequent and carry few timers each (a commit every few milliseconds, fires or
        not). A value left out is on disk already, from an earlier commit of this store;
        a machine crash recovers a prefix of the commits, so what `meta` then holds is
        the state of the last recovered commit, as before."""
        values = {
            keys.META_SCHEMA_VERSION: keys.encode_u64(keys.SCHEMA_VERSION),
            keys.META_NOW_MS: keys.encode_u64(state.now_ms),
            keys.META_FIRE_FROM: keys.encode_timer_key(state.fire_from),
            keys.META_FIRE_SEQ: keys.encode_u64(state.fire_seq),
        }
        for lower, cascade in zip(LEVELS, state.cascades, strict=False):
            values[keys.meta_horizon(lower.name)] = keys.encode_u64(cascade.horizon_ms)
            pending = cascade.pending_from
            values[keys.meta_pending(lower.name)] = (
                None if pending is None else keys.encode_timer_key(pending)
            )
        written, meta = self._meta_written, batch.writes[keys.CF_META]
        missing = object()  # not written yet by this store: a None (deleted) is a value
        meta.update(
            (key, value) for key, value in values.items() if written.get(key, missing) != value
        )
        batch.meta_state = values

    def commit(self, batch: StagedBatch, sync: bool = True) -> None:
        """Write the batch atomically; `sync`: durable against a machine crash on return
        (`RocksDatabase.write`). A batch that fails leaves `stage_state` staging every
        value again, since it cannot tell what reached the disk."""
        self.trace.stage(batch)
        try:
            self.database.write(batch.to_write_batch(self.database.handles), sync)
        except BaseException:
            self._meta_written = {}
            raise
        self._meta_written.update(batch.meta_state)

    def sync_wal(self) -> None:
        """Make every commit so far durable against a machine crash (`RocksDatabase.sync_wal`)."""
        self.database.sync_wal()


def _fire_each(
    batch: StagedBatch, entries: list[WheelEntry], ids: list[bytes], raws: list[bytes | None],
    tally: Counter[bytes], first_seq: int, now_ms: int,
) -> tuple[dict[bytes, list[FiredEntry]], int]:  # fmt: skip
    """`stage_fire`'s timers one at a time: {topic: its (seq, id, FIRED record)} and the
    seqs used. A stale key leaves the count it is no longer in; a due series is handed
    to the writer (`batch.series_due`), which fires an occurrence instead."""
    per_topic: dict[bytes, list[FiredEntry]] = {}
    seq = first_seq
    for (key, topic), message_id, raw in zip(entries, ids, raws, strict=True):
        if raw is None or not records.is_scheduled(raw):
            # A stale key; cancel removes keys atomically, so this is defensive. Its
            # timer left its minute's count when it stopped being scheduled.
            tally[keys.count_keys(topic, keys.key_time_ms(key))[0]] -= 1
            continue
        if records.is_series(raw):  # fires an occurrence instead (timerwheel.engine.series)
            batch.series_due.append((message_id, raw, topic.decode(), seq))
            seq += 1
            continue
        fired = records.as_fired(raw, now_ms, seq)
        per_topic.setdefault(topic, []).append((seq, message_id, fired))
        seq += 1
    return per_topic, seq - first_seq
