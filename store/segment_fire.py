"""The fire of the batch-level layout (decision 0014, step 3): the due wheel entries of a
version-2 store walked in cursor order, one `ready` entry a (fire chunk, topic), the fire
cursor advanced, and the cascade of an upper wheel's entries a batch.

One writer for the product and the tests (`tests/helpers/batch_v2.py` and the layout
prototype fire through it). What `SegmentFirer.stage` stages into a group commit:

- **The cascade**, hour to minute, then minute to second: every upper entry whose slot has
  started (at most `cascade_max` a wheel a call) is deleted and its pairs after the
  cursor are cut by the lower wheel's slots into that wheel's (slot, segment) entries. A
  lower entry that exists already (a Reschedule's pair) is merged with, so no pair is lost
  and none is held twice. The runs of a sorted entry are slices of its bytes, so a
  cascade costs no Python step a message unless it merges. A cascade stopped at its limit
  bounds the fire before the first slot it left, and `more` says so.
- **The fire**: the second wheel's entries from the cursor's second through `now_ms`, as
  the batch leaves them (a cascade or a send staged in the same batch is seen), give the
  places after the cursor that are due, fired in cursor order, at most `limit`. The join's
  rule (`timerwheel.store.batch_state`) decides what a place is: a pair whose segment is
  swept, whose message is cancelled, or that is not the message's place (a Reschedule or
  a Nack's delay moved it: the override's deliver time differs) is passed over. The fired
  references go into one `ready` entry a topic, each its own fire chunk seq.
- **`meta`**: the cursor (the last place passed) and the last fire chunk seq.
- **Counts**: each fired message leaves the pending counters of its topic and deliver
  minute (`StagedBatch.count_deltas`), as version 1's fire does.
- **Wheel entries** whose last pair the cursor has passed are deleted.

The firer keeps in memory the cursor and the last chunk seq (read from `meta` at
construction, moved at staging, as version 1's scheduler takes fire seqs: the one writer
commits every batch it stages), and what the rule needs a message: every live override
(read at construction: they are rare), the topic table of the segments the last two calls
fired from, and the decoded second-wheel entries it read from the store. Writers tell it
what it cannot see in the batch it stages into:

- `placed`: an entry staged into the minute or hour wheel (the send does this through
  `SegmentSender`'s `placed`). An upper wheel is walked only when one of its slots has
  started since the last walk or such an entry came, since a walk of an empty range costs
  an iterator a tick;
- `overridden`: an override (Cancel, Reschedule, Nack, ...); it also drops the segment's
  decoded entries, since a Reschedule's pair rewrites one;
- `forget`: a sweep's segments, after the sweep's commit.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Mapping
from itertools import islice, repeat
from operator import itemgetter
from typing import Any, NamedTuple

from rocksdict import ReadOptions

from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.batch_state import Place
from timerwheel.store.segment_send import SLOT_MS
from timerwheel.store.segments import SegmentView

CASCADE_MAX = 64  # upper entries a wheel a call: each holds up to a segment's messages
BEFORE_EVERY_PLACE: Place = (-1, 0, 0)
_CASCADES = (("hour", "minute"), ("minute", "second"))
_SECOND_MS = SLOT_MS["second"]
_TIME, _SEGMENT, _INDEX = itemgetter(0), itemgetter(1), itemgetter(2)


class FireChunk(NamedTuple):
    """One `ready` entry a fire staged: a topic's fired references, in cursor order."""

    topic: str
    seq: int
    key: bytes
    segments: list[int]
    indexes: list[int]


class Fired(NamedTuple):
    chunks: list[FireChunk]  # by chunk seq
    cursor: Place  # as the batch leaves it
    more: bool  # due places or upper entries are left: fire again at once


class _Topics(NamedTuple):
    """What the fire reads of a segment: its topic table and, with more than one topic,
    each message's index into it."""

    table: tuple[str, ...]
    indexes: bytes | None


class SegmentFirer:
    """Stages the fire and the cascade of a version-2 store, over its families by name.
    For the one writer thread, which commits every batch it stages."""

    def __init__(self, families: Mapping[str, Any], cascade_max: int = CASCADE_MAX) -> None:
        if cascade_max < 1:
            raise ValueError(f"cascade_max must be at least 1, not {cascade_max}")
        self._cf, self.cascade_max = families, cascade_max
        self._overrides: dict[int, dict[int, be.Override]] = {}
        for key, value in _range(families[bk.CF_OVERRIDES], b"", None):
            seq, index = bk.decode_place_key(key)
            self._overrides.setdefault(seq, {})[index] = be.decode_override(value)
        raw = families[bk.CF_META].get(bk.META_FIRE_CURSOR)
        self._cursor = BEFORE_EVERY_PLACE if raw is None else be.decode_cursor(raw)
        raw = families[bk.CF_META].get(bk.META_CHUNK_SEQ)
        self._chunk_seq = 0 if raw is None else keys.decode_u64(raw)
        # An upper wheel holds no entry whose slot starts at or before this (-1: unknown).
        self._clear_ms = {upper: -1 for upper, _ in _CASCADES}
        self._topics: dict[int, _Topics | None] = {}  # this call's segments
        self._topics_before: dict[int, _Topics | None] = {}  # the last call's
        # Committed second-wheel entries, decoded (`_entry`), by key.
        self._entries: dict[bytes, tuple[bytes, int, Any, Any]] = {}

    def placed(self, wheel: str, slot_start_ms: int) -> None:
        """A writer staged an entry of `wheel` whose slot starts at `slot_start_ms`."""
        clear = self._clear_ms.get(wheel)
        if clear is not None and slot_start_ms <= clear:
            self._clear_ms[wheel] = slot_start_ms - 1

    def overridden(self, seq: int, index: int, override: be.Override) -> None:
        """A writer staged this override of a message (Cancel, Reschedule, Nack, ...)."""
        self._overrides.setdefault(seq, {})[index] = override
        for key in [k for k, entry in self._entries.items() if entry[1] == seq]:
            del self._entries[key]

    def forget(self, seq: int) -> None:
        """Segment `seq` is swept (committed): its overrides, topics and decoded entries
        leave memory."""
        self._overrides.pop(seq, None)
        self._topics.pop(seq, None)
        self._topics_before.pop(seq, None)
        for key in [k for k, entry in self._entries.items() if entry[1] == seq]:
            del self._entries[key]

    def override(self, seq: int, index: int) -> be.Override | None:
        """The message's override as the writers left it, if it has one."""
        return self._overrides.get(seq, {}).get(index)

    def overrides_of(self, seq: int) -> dict[int, be.Override]:
        """Segment `seq`'s overrides by index (a copy; empty when it has none)."""
        return dict(self._overrides.get(seq, {}))

    def cursor(self) -> Place:
        """Fired through this place, as the last batch staged leaves it; before every
        place at first."""
        return self._cursor

    def stage(self, batch: StagedBatch, now_ms: int, limit: int) -> Fired:
        """Cascade what has come due, then fire at most `limit` messages due through
        `now_ms` in cursor order, into `batch`."""
        if limit < 1:
            raise ValueError(f"a fire of at most {limit} messages")
        cursor = self._cursor
        through_ms, more = now_ms, False
        for upper, lower in _CASCADES:
            through_ms, stopped = self._cascade(batch, upper, lower, through_ms, cursor)
            more |= stopped
        self._topics_before, self._topics = self._topics, {}
        entries = self._due_entries(batch, cursor, through_ms)
        candidates: list[Place] = []
        seqs: list[int] = []
        cursor_ms = cursor[0]
        for _, seq, times, indexes in entries:
            after = bisect_right(times, cursor_ms)
            end = bisect_right(times, through_ms, after)
            found = len(candidates)
            if after and times[after - 1] == cursor_ms:  # the cursor's ms: compare whole places
                start = bisect_left(times, cursor_ms, 0, after)
                candidates += [
                    (cursor_ms, seq, i)
                    for i in indexes[start:after]
                    if (cursor_ms, seq, i) > cursor
                ]
            if end > after:
                candidates += zip(times[after:end], repeat(seq), indexes[after:end])
            if len(candidates) > found:
                seqs.append(seq)
        if len(seqs) > 1:
            candidates.sort()
        fired, passed = self._select(batch, candidates, seqs, limit)
        more |= passed < len(candidates)
        new_cursor = candidates[passed - 1] if passed else cursor
        writes = batch.writes
        second = writes[keys.CF_WHEEL["second"]]
        for key, seq, times, indexes in entries:
            if (times[-1], seq, indexes[-1]) <= new_cursor:
                second[key] = None
                self._entries.pop(key, None)
        chunks = self._stage_chunks(batch, fired, now_ms)
        if new_cursor != cursor:
            writes[bk.CF_META][bk.META_FIRE_CURSOR] = be.cursor_value(*new_cursor)
            self._cursor = new_cursor
        return Fired(chunks, new_cursor, more)

    def _select(
        self, batch: StagedBatch, candidates: list[Place], seqs: list[int], limit: int
    ) -> tuple[dict[str, list[Place]], int]:
        """{topic: its fired places} and how many candidates the cursor passed: a place
        fires unless the join's rule says it is not the message's place now."""
        topics = {seq: self._segment_topics(batch, seq) for seq in seqs}
        overrides = self._overrides
        first = topics[seqs[0]] if seqs else None
        if first is not None and first.indexes is None:
            name = first.table[0]
            for seq in seqs:  # the usual fire: nothing to pass over, one topic
                found = topics[seq]
                if seq in overrides or found is None or found.indexes or found.table[0] != name:
                    break
            else:
                taken = candidates[:limit]
                return {name: taken}, len(taken)
        fired: dict[str, list[Place]] = {}
        taken_n = passed = 0
        for place in candidates:
            if taken_n == limit:
                break
            passed += 1
            t, seq, index = place
            found = topics[seq]
            if found is None:
                continue  # swept: every message of it was terminal
            override = overrides.get(seq, {}).get(index)
            topic = found.table[0 if found.indexes is None else found.indexes[index]]
            if override is not None:
                if override.cancelled_at_ms is not None:
                    continue
                if override.deliver_ms is not None and override.deliver_ms != t:
                    continue  # moved: a stale pair
                topic = topic if override.topic is None else override.topic
            fired.setdefault(topic, []).append(place)
            taken_n += 1
        return fired, passed

    def _stage_chunks(
        self, batch: StagedBatch, fired: dict[str, list[Place]], now_ms: int
    ) -> list[FireChunk]:
        """A `ready` entry a topic, the chunk seq in `meta`, the counters' decrements."""
        if not fired:
            return []
        chunk_seq = self._chunk_seq
        writes, deltas = batch.writes, batch.count_deltas
        chunks = []
        for topic, places in fired.items():
            chunk_seq += 1
            segments, indexes = list(map(_SEGMENT, places)), list(map(_INDEX, places))
            key = bk.chunk_key(topic, chunk_seq)
            writes[bk.CF_READY][key] = be.refs_entry(now_ms, segments, indexes)
            chunks.append(FireChunk(topic, chunk_seq, key, segments, indexes))
            first_ms = places[0][0]  # places are in cursor order: the earliest first
            minute_ms = first_ms - first_ms % keys.COUNT_BUCKET_MS
            if places[-1][0] < minute_ms + keys.COUNT_BUCKET_MS:  # usual: one minute
                bucket = keys.count_bucket_key(topic.encode(), minute_ms)
                tally = {bucket: len(places)}
            else:
                tally = keys.count_bucket_tally(
                    [topic.encode()] * len(places), list(map(_TIME, places))
                )
            for bucket, timers in tally.items():
                deltas[bucket] = deltas.get(bucket, 0) - timers
            batch.fired += len(places)
        writes[bk.CF_META][bk.META_CHUNK_SEQ] = keys.encode_u64(chunk_seq)
        self._chunk_seq = chunk_seq
        return chunks

    def _due_entries(
        self, batch: StagedBatch, cursor: Place, through_ms: int
    ) -> list[tuple[bytes, int, Any, Any]]:
        """(key, segment, deliver ms, indexes) of the second wheel's entries from the cursor's
        second through `through_ms`, as the batch leaves them, in key order."""
        if through_ms < 0:
            return []
        first = max(cursor[0], 0)
        lo, hi = bk.slot_bound(first - first % _SECOND_MS), bk.slot_bound(through_ms + 1)
        family = keys.CF_WHEEL["second"]
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(hi)
        committed = list(self._cf[family].keys(from_key=lo, read_opt=read_options))
        staged = {k: v for k, v in batch.writes[family].items() if lo <= k < hi}
        cache, out = self._entries, []
        for key in sorted(set(committed).union(staged)) if staged else committed:
            if key in staged:
                cache.pop(key, None)
                if staged[key] is not None:
                    out.append(_entry(key, staged[key]))  # type: ignore[arg-type]
                continue
            found = cache.get(key)
            if found is None:
                found = cache[key] = _entry(key, self._cf[family][key])
            out.append(found)
        return out

    def _cascade(
        self, batch: StagedBatch, upper: str, lower: str, through_ms: int, cursor: Place
    ) -> tuple[int, bool]:
        """Move `upper`'s entries whose slot starts by `through_ms` into `lower`; (the
        time the wheels below are complete through, whether the limit stopped it)."""
        upper_family, lower_family = keys.CF_WHEEL[upper], keys.CF_WHEEL[lower]
        upper_ms, lower_ms = SLOT_MS[upper], SLOT_MS[lower]
        clear_ms = self._clear_ms[upper]
        if through_ms - through_ms % upper_ms <= clear_ms:
            return through_ms, False  # no slot started and no entry came since the walk
        first = max(cursor[0], 0)
        entries = _range_overlay(
            self._cf[upper_family], batch.writes[upper_family],
            bk.slot_bound(first - first % upper_ms), bk.slot_bound(max(through_ms + 1, 0)),
            self.cascade_max + 1,
        )  # fmt: skip
        stopped = len(entries) > self.cascade_max
        if stopped:
            through_ms = bk.decode_wheel_entry_key(entries[-1][0])[0] - 1
            del entries[-1]
        self._clear_ms[upper] = max(clear_ms, through_ms)
        staged_upper, staged_lower = batch.writes[upper_family], batch.writes[lower_family]
        for key, value in entries:
            staged_upper[key] = None
            seq = bk.decode_wheel_entry_key(key)[1]
            times, indexes = be.decode_wheel_entry(value)
            n, at = len(times), bisect_left(times, cursor[0])
            while at < n and (times[at], seq, indexes[at]) <= cursor:
                at += 1  # passed by the cursor: never a place again
            while at < n:
                start = times[at] - times[at] % lower_ms
                end = bisect_left(times, start + lower_ms, at)
                lower_key = bk.wheel_entry_key(start, seq)
                run = value[8 * at : 8 * end] + value[8 * n + 2 * at : 8 * n + 2 * end]
                old = (
                    staged_lower[lower_key] if lower_key in staged_lower
                    else self._cf[lower_family].get(lower_key)
                )  # fmt: skip
                staged_lower[lower_key] = run if old is None else _merged(old, run)
                self._entries.pop(lower_key, None)
                self.placed(lower, start)
                at = end
        return through_ms, stopped

    def _segment_topics(self, batch: StagedBatch, seq: int) -> _Topics | None:
        """The segment's topic table (None: swept), read once while the fire uses it."""
        if seq in self._topics:
            return self._topics[seq]
        if seq in self._topics_before:
            found = self._topics[seq] = self._topics_before[seq]
            return found
        key = bk.segment_key(seq)
        staged = batch.writes[bk.CF_SEGMENTS]
        raw = staged[key] if key in staged else self._cf[bk.CF_SEGMENTS].get(key)
        if raw is None:
            self._topics[seq] = None
            return None
        view = SegmentView(raw)
        found = self._topics[seq] = _Topics(
            view.topics, None if len(view.topics) == 1 else view.topic_indexes()
        )
        return found


def _entry(key: bytes, value: bytes) -> tuple[bytes, int, Any, Any]:
    """A wheel entry decoded: (key, segment, deliver ms column, index column)."""
    times, indexes = be.decode_wheel_entry(value)
    return key, bk.decode_wheel_entry_key(key)[1], times, indexes


def _merged(old: bytes, run: bytes) -> bytes:
    """Two entries of one (slot, segment) as one: the union of their pairs, sorted."""
    pairs = sorted({
        *zip(*be.decode_wheel_entry(old), strict=True),
        *zip(*be.decode_wheel_entry(run), strict=True),
    })  # fmt: skip
    return be.wheel_entry([p[0] for p in pairs], [p[1] for p in pairs])


def _range(family: Any, lo: bytes, hi: bytes | None) -> list[tuple[bytes, bytes]]:
    read_options = ReadOptions()
    if hi is not None:
        read_options.set_iterate_upper_bound(hi)
    return list(family.items(from_key=lo, read_opt=read_options))


def _range_overlay(
    family: Any, staged: dict[bytes, bytes | None], lo: bytes, hi: bytes, limit: int
) -> list[tuple[bytes, bytes]]:
    """(key, value) in [lo, hi) as a batch leaves them, at most `limit`, in key order."""
    if hi <= lo:
        return []
    mine = {k: v for k, v in staged.items() if lo <= k < hi}
    read_options = ReadOptions()
    read_options.set_iterate_upper_bound(hi)
    items = family.items(from_key=lo, read_opt=read_options)
    if not mine:
        return list(islice(items, limit))
    merged = dict(items)  # a staged delete may drop any of them: all are read
    for key, value in mine.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return sorted(merged.items())[:limit]
