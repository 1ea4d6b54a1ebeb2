"""Get, List and Count of a version-2 store (decision 0014), with the answers of
`timerwheel.store.timer_reads.TimerReads`: a `Timer`, a `PendingPage`, a count.

Every state comes from the state join (`timerwheel.store.batch_state`); this module only
turns its answers and the segments they name into what version 1's readers return. What
differs from version 1, and why:

- `get` takes a server-made id (46 hex digits, `timerwheel.store.segment_ids`) or a
  client-chosen one, found through its `ids` entry. An unscoped client id (a server
  without tokens, decision 0012) may have a server-made id's shape: an id of that shape
  that names no message of its segment is looked up in `ids` too. One that does name one
  was drawn by the server (80 random bits), so a client cannot shadow it by guessing.
- A FIRED message's `ready_seq` is its fire position: the seq of the newest `ready` chunk
  of its topic naming it, shifted left by `READY_PLACE_BITS`, plus its place in that
  chunk (`ready_seq`). Version 1's is a fire seq a message, and its readers rely on two
  things, which this keeps: within a topic it grows in fire order (a fetch continues
  after one, and a chunk's places are in cursor order), and it is unique in the store
  (chunk seqs come from one counter). Across topics it follows the fire calls, not the
  cursor order within one call. 20 bits hold any fire limit a tick uses (`fire_chunk`,
  10,000 by default) and leave 43 for chunk seqs, so it stays a positive i64 as a
  version-1 record keeps it. 0 when no chunk names it, and for ACKED and CANCELLED
  messages, which report no fired-at either (the join's rule). The chunk is found by a
  walk of the topic's live `ready` entries, as the join's fired-at is: a Get is a cold
  path, and the engine will hold these in memory.
- `list_pending`'s continuation is a place (deliver ms, segment, index, as the fire
  cursor's bytes), not a wheel key. A wheel entry is one a (slot, segment) and holds
  pairs of any time in its slot, so the walk merges the three wheels' entries by key
  (slot start, segment) and a place is settled once the next unread entry's slot starts
  after it: no entry left can hold an earlier one. The walk starts at the slot of the
  later of `from_ms` and `after`'s time in each wheel, and stops once `limit` places
  after `after` are settled. `scan_budget` counts wheel entries read (0:
  `LIST_ENTRY_BUDGET`), as version 1's counts keys. When it runs out, the page ends early,
  possibly empty, with the continuation (the next slot start - 1 ms, after every
  segment and index), so no page's cost grows with the range or how deep the page is.
  One exception keeps each call moving: entries are read past the budget until the
  continuation is after `after` (at least 1 ms further), so a call also reads every
  entry whose slot holds `after`'s time: in each wheel, one a segment with pairs in that
  slot. `floors` does not apply: a wheel entry is deleted a batch at a time, so no
  tombstones pile up below the fire cursor.
- `count_pending` is exact to the ms, through the join; the `counts` family the send keeps
  (`timerwheel.store.counts.PendingCounts`, as version 1's Count) answers in whole minutes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import replace
from heapq import heappop, heappush, merge
from typing import Any, NamedTuple

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_state import (
    NO_TIME_BOUND_MS,
    BatchStateReader,
    LiveEntries,
    MessageState,
    Place,
    join,
)
from timerwheel.store.keys import CF_WHEEL, prefix_end, ready_prefix
from timerwheel.store.segment_ids import format_id, parse_id
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import PendingPage, TimerReads
from timerwheel.wheels.domain import NO_PROPERTIES, Timer
from timerwheel.wheels.wheel import LEVELS

_SLOT_MS = {wheel.name: wheel.slot_ms for wheel in LEVELS}
READY_PLACE_BITS = 20  # a place in a fire chunk; the chunk seq above it (see the module)
LIST_ENTRY_BUDGET = 256  # wheel entries a List call reads when its caller gives no budget
_AFTER_EVERY_SEGMENT = (2**64 - 1, 2**16 - 1)  # (segment, index) above every real place's


class BatchTimerReads:
    """`TimerReads`' Get, List and Count for a version-2 store, over its column families
    by name (`timerwheel.store.rocks.RocksDatabase.families` follows a reopen)."""

    def __init__(self, families: Mapping[str, Any]) -> None:
        self._cf = families
        self.join = BatchStateReader(families)

    def get(self, message_id: str) -> Timer | None:
        """The message in any state, SCHEDULED ones with the wheel that holds them."""
        located = self._locate(message_id)
        if located is None:
            return None
        view, found = located
        timer = to_timer(view, found)
        if found.state is State.SCHEDULED:
            timer = replace(timer, wheel=self._wheel_of(found, _SLOT_MS))
        elif found.state is State.FIRED:
            where = fire_position(self._cf, found.topic, found.segment, found.message_index)
            timer = replace(timer, ready_seq=0 if where is None else ready_seq(*where))
        return timer

    def find_wheel(self, timer: Timer, candidates: Iterable[str]) -> str:
        """Which of the candidate wheels holds the SCHEDULED `timer` ('' if none)."""
        located = self._locate(timer.message_id)
        if located is None:
            return ""
        return self._wheel_of(located[1], {name: _SLOT_MS[name] for name in candidates})

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, after: bytes | None,
        floors: Mapping[str, bytes] | None = None, scan_budget: int = 0,
        max_bytes: int = 2**62, include_body: bool = True,
    ) -> PendingPage:  # fmt: skip
        """SCHEDULED messages of `topic` due in [from_ms, to_ms), by place, at most
        `limit`, after the place `after` names (a previous page's `next_after`); the page
        ends early once its bodies, topics and properties reach `max_bytes` (one message
        at least). `floors` and `scan_budget` are version 1's (see the module)."""
        place = None if after is None else be.decode_cursor(after)
        budget = scan_budget or LIST_ENTRY_BUDGET
        found, next_after = self._walk(topic, from_ms, to_ms, limit, place, budget)
        views: dict[int, SegmentView] = {}
        timers: list[Timer] = []
        held, last = 0, None
        for one in found:
            view = views.get(one.segment)
            if view is None:
                raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(one.segment))
                if raw is None:  # swept between the walk's read and this one
                    continue
                view = views[one.segment] = SegmentView(raw)
            timer = to_timer(view, one, include_body)
            size = len(timer.body) + len(timer.topic) + sum(map(len, _flat(timer.properties)))
            if last is not None and held + size > max_bytes:
                return PendingPage(timers, _place_bytes(last))
            held += size
            timers.append(timer)
            last = one
        return PendingPage(timers, None if next_after is None else be.cursor_value(*next_after))

    def _walk(
        self, topic: str, from_ms: int, to_ms: int, limit: int, after: Place | None, budget: int
    ) -> tuple[list[MessageState], Place | None]:
        """The SCHEDULED messages of `topic` in [from_ms, to_ms) after `after`, by place,
        at most `limit`, and where the next page continues (None: the range is done). The
        three wheels' entries are read merged in key order, at most `budget` of them but
        for those the call must read to move past `after` (see the module)."""
        low = after if after is not None else (from_ms - 1, *_AFTER_EVERY_SEGMENT)
        start_ms = max(from_ms, low[0], 0)
        streams = [
            _entries(self._cf[family], bk.slot_bound(start_ms - start_ms % _SLOT_MS[name]),
                     bk.slot_bound(to_ms))
            for name, family in CF_WHEEL.items()
        ]  # fmt: skip
        live = LiveEntries(self._cf)
        floor = max(low, live.cursor)  # at or before the cursor: not SCHEDULED
        segments: dict[int, _Segment | None] = {}
        pending: list[Place] = []  # read, not yet settled: a heap
        found: list[MessageState] = []
        last = None
        for read, (key, value) in enumerate(merge(*streams)):  # `read` entries before this
            slot_ms, seq = bk.decode_wheel_entry_key(key)
            while pending and pending[0][0] < slot_ms:  # no entry left holds an earlier place
                place = heappop(pending)
                if place != last:  # a pair may be in two wheels' entries (moved back)
                    last = place
                    answer = self._scheduled(topic, place, segments, live)
                    if answer is not None:
                        found.append(answer)
                        if len(found) == limit:
                            return found, place
            if read >= budget and (slot_ms - 1, *_AFTER_EVERY_SEGMENT) > low:
                return found, (slot_ms - 1, *_AFTER_EVERY_SEGMENT)
            for t, index in zip(*be.decode_wheel_entry(value), strict=True):
                if from_ms <= t < to_ms and (t, seq, index) > floor:
                    heappush(pending, (t, seq, index))
        while pending:
            place = heappop(pending)
            if place != last:
                last = place
                answer = self._scheduled(topic, place, segments, live)
                if answer is not None:
                    found.append(answer)
                    if len(found) == limit:
                        return found, place if pending else None
        return found, None

    def _scheduled(
        self, topic: str, place: Place, segments: dict[int, _Segment | None], live: LiveEntries
    ) -> MessageState | None:
        """The join's answer for a pair after the cursor, if it is a SCHEDULED message of
        `topic` whose place this is (a moved message's old pair is not)."""
        t, seq, index = place
        if seq not in segments:
            segments[seq] = _read_segment(self._cf, seq)
        segment = segments[seq]
        if segment is None or segment.segstate or index >= segment.view.n:
            return None  # swept, or terminal: every message of it is
        override = segment.overrides.get(index)
        deliver_ms = segment.view.deliver_ms(index)
        if override is not None and override.deliver_ms is not None:
            deliver_ms = override.deliver_ms
        if deliver_ms != t:
            return None  # a stale pair; checked first, so the join stops at row 3
        answer = join(
            segment.message_id(seq, index), seq, index, segment.view, None, override, live
        )
        if answer.state is State.SCHEDULED and answer.topic == topic:
            return answer
        return None

    def count_pending(self, topic: str, from_ms: int = 0, to_ms: int = NO_TIME_BOUND_MS) -> int:
        """SCHEDULED messages of `topic` due in [from_ms, to_ms), exact."""
        return self.join.count_scheduled(topic, from_ms, to_ms)

    def _locate(self, message_id: str) -> tuple[SegmentView, MessageState] | None:
        """A server-made id's message, else a client-chosen id's (which may have the same
        shape: see the module)."""
        try:
            parse_id(message_id)
        except ValueError:
            return self.join.locate_client_id(message_id)
        return self.join.locate(message_id) or self.join.locate_client_id(message_id)

    def _wheel_of(self, found: MessageState, slots_ms: Mapping[str, int]) -> str:
        """The wheel whose (slot, segment) entry holds the message's place."""
        t, seq, index = found.deliver_at_ms, found.segment, found.message_index
        for name, slot_ms in slots_ms.items():
            raw = self._cf[CF_WHEEL[name]].get(bk.wheel_entry_key(t - t % slot_ms, seq))
            if raw is not None and (t, index) in zip(*be.decode_wheel_entry(raw), strict=True):
                return name
        return ""


def to_timer(view: SegmentView, found: MessageState, include_body: bool = True) -> Timer:
    """The `Timer` a Get reports for a message the join answered, from its segment."""
    index = found.message_index
    extras = view.extras(index)
    return Timer(
        found.message_id,
        found.topic,
        view.body(index) if include_body else b"",
        extras.properties if extras is not None and extras.properties else NO_PROPERTIES,
        found.deliver_at_ms,
        view.created_ms,
        found.state,
        view.when(index),
        fired_at_ms=found.fired_at_ms,
        acked_at_ms=found.acked_at_ms,
        cancelled_at_ms=found.cancelled_at_ms,
    )


def _flat(properties: Mapping[str, str]) -> list[str]:
    return [*properties.keys(), *properties.values()]


def _place_bytes(found: MessageState) -> bytes:
    """A page's continuation: the place of its last message, as the cursor's bytes."""
    return be.cursor_value(found.deliver_at_ms, found.segment, found.message_index)


def ready_seq(chunk_seq: int, place: int) -> int:
    """A FIRED message's `Timer.ready_seq`: its fire chunk's seq and its place in it."""
    if not 0 <= place < 1 << READY_PLACE_BITS:
        raise ValueError(f"place {place} in a fire chunk: at most {READY_PLACE_BITS} bits")
    return chunk_seq << READY_PLACE_BITS | place


def fire_position(
    families: Mapping[str, Any], topic: str, segment: int, index: int
) -> tuple[int, int] | None:
    """(chunk seq, place in it) of the newest of `topic`'s `ready` chunks naming the
    message, as the join's fired-at takes the newest; None when none does."""
    prefix = ready_prefix(topic)
    where = None
    for key, value in _items(families[bk.CF_READY], prefix, prefix_end(prefix)):
        refs = be.decode_refs(value)  # chunks in seq order: the newest is last
        for place, ref in enumerate(zip(refs.segments, refs.indexes, strict=True)):
            if ref == (segment, index):
                where = bk.chunk_seq(key), place
                break
    return where


class _Segment(NamedTuple):
    """What a List call reads of a segment once: the segment, whether it is terminal
    (`segstate`), and its overrides by index."""

    view: SegmentView
    segstate: bool
    overrides: dict[int, be.Override]

    def message_id(self, seq: int, index: int) -> str:
        """The id its sender knows: a client-chosen one if it was sent with one."""
        extras = self.view.extras(index)
        if extras is not None and extras.client_id is not None:
            return extras.client_id
        return format_id(self.view.deliver_ms(index), seq, index, self.view.random(index))


def _read_segment(families: Mapping[str, Any], seq: int) -> _Segment | None:
    raw = families[bk.CF_SEGMENTS].get(bk.segment_key(seq))
    if raw is None:
        return None
    first, end = bk.segment_range(seq)
    overrides = {
        bk.decode_place_key(key)[1]: be.decode_override(value)
        for key, value in _items(families[bk.CF_OVERRIDES], first, end)
    }
    segstate = families[bk.CF_SEGSTATE].get(bk.segment_key(seq)) is not None
    return _Segment(SegmentView(raw), segstate, overrides)


def _entries(family: Any, lo: bytes, hi: bytes) -> Iterator[tuple[bytes, bytes]]:
    """A wheel's entries in [lo, hi), lazily: the merge reads each only when it is next."""
    return _items(family, lo, hi)


# The one range read of store/ (its docstring says which rocksdict traps it avoids).
_items = TimerReads._range
