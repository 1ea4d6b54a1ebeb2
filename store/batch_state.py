"""The state join of the batch-level layout (decision 0014; version 2, planned).

In version 2 a message's state is no field of a record: it follows from its segment, the
fire cursor's order and the per-batch entries (``timerwheel.store.batch_entries``). This
module owns the rule. A message is named by (segment seq, index), its *place* by
(deliver ms, segment, index), which is the order the fire cursor advances in. The first
row that holds decides:

===  ===============================================  ===========  ===========================
row  what decides                                     state        time it reports
===  ===============================================  ===========  ===========================
0    no `segments` entry, or the id's deliver time    not found    -
     or random part is not the segment's (swept,
     forged or stale id)
1    the segment's `segstate` entry (all of it is     its byte     acked_at or cancelled_at:
     terminal)                                                     the entry's time
2    an `overrides` entry with cancelled-at (Cancel,  CANCELLED    cancelled_at
     a purge, a REPLACE's old copy, a dead-letter
     move)
3    the place is after the fire cursor in `meta`     SCHEDULED    -
     (none: nothing has fired)
4    an `acked` entry names it                        ACKED        acked_at: the earliest
                                                                   such entry's (Ack call
                                                                   seq order)
5    otherwise: fired through by the cursor           FIRED        fired_at: the fire ms of
                                                                   the newest `ready` chunk
                                                                   of its topic naming it
                                                                   (0 if none does)
===  ===============================================  ===========  ===========================

Beside the state: the deliver time is the override's, else the segment's column (so a
Reschedule or a Nack's delay moves the place, and a message moved after the cursor is
SCHEDULED again until the cursor passes its new place); the topic is the override's, else
the segment's. A terminal message reports its terminal time only: `segstate` keeps no
fire time, so neither does the join once a message is ACKED or CANCELLED.

What the writers must keep for the rule to hold (steps 2 to 4): a send's deliver time is
at or after the cursor's (a new segment's seq is above every fired one, so its places
follow the cursor); an override's deliver time is after the cursor's ms when written (a
Reschedule to the past is clamped, and fires at the next tick); a message gets at most one
terminal entry (the writer checks its state first). A store that holds both a cancelling
override and an `acked` entry for one message reads CANCELLED (row 2 before row 4).

Rows 1 to 3 are point reads (the segment, its `segstate`, the override) and the cursor;
rows 4 and 5 read the live `acked` and `ready` entries, which the engine will hold in
memory and `LiveEntries` here loads on first need, a call at a time. Reads are as of each
read: the engine's readers will run on its snapshot once it runs a version-2 store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.keys import CF_WHEEL, prefix_end, ready_prefix
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import TimerReads
from timerwheel.wheels.wheel import LEVELS

Place = tuple[int, int, int]  # (deliver ms, segment, index): the fire cursor's order
_TERMINAL = (State.ACKED, State.CANCELLED)
_SLOT_MS = {wheel.name: wheel.slot_ms for wheel in LEVELS}
NO_TIME_BOUND_MS = 2**63 - 1


class MessageState(NamedTuple):
    """What the join answers for one message."""

    message_id: str
    segment: int
    message_index: int  # in the segment (`index` would hide tuple.index)
    topic: str
    state: State
    deliver_at_ms: int
    fired_at_ms: int = 0
    acked_at_ms: int = 0
    cancelled_at_ms: int = 0


class LiveEntries:
    """The cursor and the live `acked` and `ready` entries, each read once on first need:
    what opening a version-2 store rebuilds in memory (decision 0014)."""

    def __init__(self, families: Mapping[str, Any]) -> None:
        self._cf = families
        self._cursor: Place | None = None
        self._acked: dict[tuple[int, int], int] | None = None
        self._fired: dict[str, dict[tuple[int, int], int]] = {}

    @property
    def cursor(self) -> Place:
        """Fired through this place; (-1, 0, 0), before every place, when nothing has."""
        if self._cursor is None:
            raw = self._cf[bk.CF_META].get(bk.META_FIRE_CURSOR)
            self._cursor = (-1, 0, 0) if raw is None else be.decode_cursor(raw)
        return self._cursor

    def acked_at_ms(self, segment: int, index: int) -> int | None:
        """The time of the earliest `acked` entry naming the message, if one does."""
        if self._acked is None:
            self._acked = {}
            for _, value in _items(self._cf[bk.CF_ACKED], b"", None):
                refs = be.decode_refs(value)
                for place in zip(refs.segments, refs.indexes, strict=True):
                    self._acked.setdefault(place, refs.time_ms)
        return self._acked.get((segment, index))

    def fired_at_ms(self, topic: str, segment: int, index: int) -> int:
        """The fire time of the newest of `topic`'s `ready` chunks naming the message; 0
        when none does (a chunk goes with its last ack)."""
        fired = self._fired.get(topic)
        if fired is None:
            fired = self._fired[topic] = {}
            prefix = ready_prefix(topic)
            for _, value in _items(self._cf[bk.CF_READY], prefix, prefix_end(prefix)):
                refs = be.decode_refs(value)  # chunks in seq order: the newest is last
                fired.update(
                    dict.fromkeys(zip(refs.segments, refs.indexes, strict=True), refs.time_ms)
                )
        return fired.get((segment, index), 0)


def join(
    message_id: str,
    segment: int,
    index: int,
    view: SegmentView,
    segstate: tuple[int, int] | None,
    override: be.Override | None,
    live: LiveEntries,
) -> MessageState:
    """Rows 1 to 5 of the rule for one message of a segment that owns it (row 0 passed):
    `segstate` is its (state, time) from the segment's entry, `override` its entry."""
    deliver_ms, topic = view.deliver_ms(index), view.topic(index)
    if override is not None:
        deliver_ms = deliver_ms if override.deliver_ms is None else override.deliver_ms
        topic = topic if override.topic is None else override.topic
    answer = MessageState(message_id, segment, index, topic, State.SCHEDULED, deliver_ms)
    if segstate is not None:  # row 1
        state, at_ms = State(segstate[0]), segstate[1]
        if state not in _TERMINAL:
            raise ValueError(f"segment {segment} index {index}: segstate holds {state!r}")
        if state is State.ACKED:
            return answer._replace(state=state, acked_at_ms=at_ms)
        return answer._replace(state=state, cancelled_at_ms=at_ms)
    if override is not None and override.cancelled_at_ms is not None:  # row 2
        return answer._replace(state=State.CANCELLED, cancelled_at_ms=override.cancelled_at_ms)
    if (deliver_ms, segment, index) > live.cursor:  # row 3
        return answer
    acked_at_ms = live.acked_at_ms(segment, index)
    if acked_at_ms is not None:  # row 4
        return answer._replace(state=State.ACKED, acked_at_ms=acked_at_ms)
    fired_at_ms = live.fired_at_ms(topic, segment, index)  # row 5
    return answer._replace(state=State.FIRED, fired_at_ms=fired_at_ms)


class _Segment(NamedTuple):
    """One segment's own entries, read once for every message of it a call joins."""

    view: SegmentView
    segstate: bytes | None
    overrides: dict[int, be.Override]
    ids: list[str]


class BatchStateReader:
    """Get, List, Count and a segment walk of a version-2 store through the join, over
    its column families by name (``timerwheel.store.batch_keys``). Each call reads the
    live entries afresh (`LiveEntries`)."""

    def __init__(self, families: Mapping[str, Any]) -> None:
        self._cf = families

    def get(self, message_id: str) -> MessageState | None:
        """A server-made id's message (46 hex digits); None when row 0 holds. ValueError
        for what is not such an id."""
        found = self.locate(message_id)
        return None if found is None else found[1]

    def get_client_id(self, client_id: str) -> MessageState | None:
        """The message sent with a client-chosen id (scoped, decision 0012): its `ids` entry
        says where it is; None when there is none or its segment is gone."""
        found = self.locate_client_id(client_id)
        return None if found is None else found[1]

    def locate(self, message_id: str) -> tuple[SegmentView, MessageState] | None:
        """`get`, with the segment read for it (a Get's body and properties are there)."""
        parsed = parse_id(message_id)
        seq, index = parsed.segment, parsed.message_index
        raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(seq))
        if raw is None:
            return None
        view = SegmentView(raw)
        if not view.owns(parsed):
            return None
        return view, self._one(message_id, seq, index, view)

    def locate_client_id(self, client_id: str) -> tuple[SegmentView, MessageState] | None:
        """`get_client_id`, with the segment read for it."""
        place = self._cf[bk.CF_IDS].get(bk.ids_key(client_id))
        if place is None:
            return None
        seq, index = be.decode_place(place)
        raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(seq))
        if raw is None:
            return None
        view = SegmentView(raw)
        if index >= view.n:
            raise ValueError(f"`ids` of {client_id!r} names index {index} of a segment of {view.n}")
        return view, self._one(client_id, seq, index, view)

    def _one(self, message_id: str, seq: int, index: int, view: SegmentView) -> MessageState:
        key = bk.segment_key(seq)
        segstate_raw = self._cf[bk.CF_SEGSTATE].get(key)
        segstate = None if segstate_raw is None else be.segstate_of(segstate_raw, index)
        override_raw = self._cf[bk.CF_OVERRIDES].get(bk.place_key(seq, index))
        override = None if override_raw is None else be.decode_override(override_raw)
        return join(message_id, seq, index, view, segstate, override, LiveEntries(self._cf))

    def scan(
        self, topic: str | None = None, first_segment: int = 0, end_segment: int | None = None
    ) -> Iterator[MessageState]:
        """Every message of the segments in [first, end) (all of them by default), in
        (segment, index) order, of `topic` if given: the export's and the capacity report's
        walk, any state."""
        live = LiveEntries(self._cf)
        hi = None if end_segment is None else bk.segment_key(end_segment)
        for key, raw in _items(self._cf[bk.CF_SEGMENTS], bk.segment_key(first_segment), hi):
            seq = bk.segment_seq(key)
            segment = self._segment(seq, raw)
            segstates = None if segment.segstate is None else be.decode_segstate(segment.segstate)
            for index in range(segment.view.n):
                found = join(
                    segment.ids[index], seq, index, segment.view,
                    None if segstates is None else (segstates[0][index], segstates[1][index]),
                    segment.overrides.get(index), live,
                )  # fmt: skip
                if topic is None or found.topic == topic:
                    yield found

    def count_states(self, topic: str | None = None) -> Counter[State]:
        """Messages by state, of `topic` if given (a walk of every segment)."""
        return Counter(found.state for found in self.scan(topic))

    def list_scheduled(
        self, topic: str, from_ms: int = 0, to_ms: int = NO_TIME_BOUND_MS,
        limit: int = 1 << 62, after: Place | None = None,
    ) -> list[MessageState]:  # fmt: skip
        """SCHEDULED messages of `topic` due in [from_ms, to_ms), by place, after `after`
        (the last place of the previous page), at most `limit`: v1's List. The wheels'
        entries name the candidates; the join keeps a pair only while it is the message's
        place (a Reschedule leaves the old pair behind, a Cancel the pair itself)."""
        candidates: set[Place] = set()
        for name, family in CF_WHEEL.items():
            first = max(from_ms - from_ms % _SLOT_MS[name], 0)
            entries = _items(self._cf[family], bk.slot_bound(first), bk.slot_bound(to_ms))
            for key, value in entries:
                seq = bk.decode_wheel_entry_key(key)[1]
                times, indexes = be.decode_wheel_entry(value)
                candidates.update(
                    (t, seq, i)
                    for t, i in zip(times, indexes, strict=True)
                    if from_ms <= t < to_ms and (after is None or (t, seq, i) > after)
                )
        live = LiveEntries(self._cf)
        segments: dict[int, _Segment | None] = {}
        found: list[MessageState] = []
        for place in sorted(candidates):
            if len(found) >= limit:
                break
            t, seq, index = place
            segment = segments.get(seq)
            if seq not in segments:
                raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(seq))
                segment = segments[seq] = None if raw is None else self._segment(seq, raw)
            if segment is None or segment.segstate is not None or index >= segment.view.n:
                continue  # swept, or terminal: every message of it is
            answer = join(
                segment.ids[index], seq, index, segment.view, None,
                segment.overrides.get(index), live,
            )  # fmt: skip
            if (
                answer.state is State.SCHEDULED
                and answer.topic == topic
                and answer.deliver_at_ms == t
            ):
                found.append(answer)
        return found

    def count_scheduled(self, topic: str, from_ms: int = 0, to_ms: int = NO_TIME_BOUND_MS) -> int:
        """How many SCHEDULED messages of `topic` are due in [from_ms, to_ms): v1's Count,
        exact, through the same join as `list_scheduled`."""
        return len(self.list_scheduled(topic, from_ms, to_ms))

    def _segment(self, seq: int, raw: bytes) -> _Segment:
        view = SegmentView(raw)
        first, end = bk.segment_range(seq)
        overrides = {
            bk.decode_place_key(key)[1]: be.decode_override(value)
            for key, value in _items(self._cf[bk.CF_OVERRIDES], first, end)
        }
        ids = [raw_id.decode() for raw_id in view.message_ids(seq)]
        for index in range(view.n):  # a client-chosen id is the one its sender knows
            extras = view.extras(index)
            if extras is not None and extras.client_id is not None:
                ids[index] = extras.client_id
        return _Segment(view, self._cf[bk.CF_SEGSTATE].get(bk.segment_key(seq)), overrides, ids)


# The one range read of store/ (its docstring says which rocksdict traps it avoids).
_items = TimerReads._range
