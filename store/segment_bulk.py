"""The pages of a version-2 bulk cancel or purge (decision 0014, step 5): the ids a
filter selects, found through the state join (`timerwheel.store.batch_state`), a bounded
page at a time, as version 1's `timerwheel.store.bulk` finds them in its records. The
writer checks each again when it stages (`timerwheel.store.segment_moves`).

| filter                  | scanned, in this order                                         |
|-------------------------|----------------------------------------------------------------|
| topic and time range    | the three wheels' entries over [from_ms, to_ms), by place;     |
|                         | then (purge only) `ready`: the topic's chunks, or all          |

A series or an id prefix is not served yet: version 2 keeps no series, and a prefix of
server-made ids means nothing (a prefix of client-chosen ids would walk `ids`).

A page token is (scan, key): `BY_WHEEL` and the last place taken (the fire cursor's
encoding), or `BY_READY` and the last chunk's key taken. A page stops at `limit` ids; a
`ready` chunk is taken whole, so a purge's page may pass `limit` by one chunk's messages.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_state import LiveEntries, MessageState, Place, join
from timerwheel.store.keys import CF_WHEEL, prefix_end, ready_prefix
from timerwheel.store.segment_ids import format_id
from timerwheel.store.segment_send import SLOT_MS
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import TimerReads
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.domain import InvalidArgument

BY_WHEEL, BY_READY = b"w", b"r"
Cursor = tuple[bytes, bytes]  # (scan, the last key it took)
_NO_BOUND_MS = 2**63 - 1


class BulkPage(NamedTuple):
    ids: list[str]  # in scan order, each once
    next: Cursor | None  # where the next page continues; None: nothing more


def select(
    families: Mapping[str, Any], f: TimerFilter, *, purge: bool, after: Cursor | None,
    limit: int,
) -> BulkPage:  # fmt: skip
    """Ids of the messages `f` selects that a bulk cancel (SCHEDULED) or a purge
    (FIRED too) would change, from `after` on, at most `limit` (a purge's last chunk
    whole). InvalidArgument, naming the field, for what version 2 does not serve."""
    if f.series_id:
        raise InvalidArgument("filter.series_id", f.series_id, "is not served by version 2")
    if f.id_prefix:
        raise InvalidArgument("filter.id_prefix", f.id_prefix, "is not served by version 2")
    if limit < 1:
        raise InvalidArgument("limit", limit, "must be at least 1")
    if after is not None and after[0] not in (BY_WHEEL, BY_READY):
        raise InvalidArgument("page_token", after, "is not a token this store issued")
    reader = _Reader(families)
    ids: dict[str, None] = {}
    if after is None or after[0] == BY_WHEEL:
        place = None if after is None else be.decode_cursor(after[1])
        for found_place, found in reader.scheduled(f, place):
            ids[found.message_id] = None
            if len(ids) >= limit:
                return BulkPage(list(ids), (BY_WHEEL, be.cursor_value(*found_place)))
        after = None
    if purge:
        for key, found_ids in reader.fired(f, None if after is None else after[1]):
            ids.update(dict.fromkeys(found_ids))
            if len(ids) >= limit:
                return BulkPage(list(ids), (BY_READY, key))
    return BulkPage(list(ids), None)


class _Reader:
    """The join over committed entries, each segment read once a page."""

    def __init__(self, families: Mapping[str, Any]) -> None:
        self._cf, self._live = families, LiveEntries(families)
        self._segments: dict[int, tuple[SegmentView, dict[int, be.Override]] | None] = {}

    def scheduled(
        self, f: TimerFilter, after: Place | None
    ) -> Iterator[tuple[Place, MessageState]]:
        """The SCHEDULED messages `f` selects, by place, after `after`."""
        to_ms = f.to_ms or _NO_BOUND_MS
        candidates: set[Place] = set()
        for name, family in CF_WHEEL.items():
            first = max(f.from_ms - f.from_ms % SLOT_MS[name], 0)
            for key, value in _items(self._cf[family], bk.slot_bound(first), bk.slot_bound(to_ms)):
                seq = bk.decode_wheel_entry_key(key)[1]
                candidates.update(
                    (t, seq, i)
                    for t, i in zip(*be.decode_wheel_entry(value), strict=True)
                    if f.from_ms <= t < to_ms and (after is None or (t, seq, i) > after)
                )
        for place in sorted(candidates):
            found = self._join(place[1], place[2])
            if (
                found is not None
                and found.state is State.SCHEDULED
                and found.deliver_at_ms == place[0]  # not a pair a move left behind
                and f.matches(found.message_id, found.topic, found.deliver_at_ms)
            ):
                yield place, found

    def fired(self, f: TimerFilter, after: bytes | None) -> Iterator[tuple[bytes, list[str]]]:
        """(chunk key, the FIRED messages of it `f` selects) of the live `ready` chunks."""
        if f.topic:
            prefix = ready_prefix(f.topic)
            lo, hi = prefix, prefix_end(prefix)
        else:
            lo, hi = b"", None
        if after is not None:
            lo = max(lo, after + b"\x00")
        for key, value in _items(self._cf[bk.CF_READY], lo, hi):
            refs = be.decode_refs(value)
            taken = []
            for seq, index in zip(refs.segments, refs.indexes, strict=True):
                found = self._join(seq, index)
                if (
                    found is not None
                    and found.state is State.FIRED
                    and f.matches(found.message_id, found.topic, found.deliver_at_ms)
                ):
                    taken.append(found.message_id)
            yield key, taken

    def _join(self, seq: int, index: int) -> MessageState | None:
        """The join's answer for a message of a live segment; None when it is swept or
        terminal whole."""
        if seq not in self._segments:
            raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(seq))
            terminal = self._cf[bk.CF_SEGSTATE].get(bk.segment_key(seq))
            if raw is None or terminal is not None:
                self._segments[seq] = None
            else:
                first, end = bk.segment_range(seq)
                overrides = {
                    bk.decode_place_key(key)[1]: be.decode_override(value)
                    for key, value in _items(self._cf[bk.CF_OVERRIDES], first, end)
                }
                self._segments[seq] = (SegmentView(raw), overrides)
        found = self._segments[seq]
        if found is None or index >= found[0].n:
            return None
        view, overrides = found
        extras = view.extras(index)
        message_id = (
            extras.client_id
            if extras is not None and extras.client_id is not None
            else format_id(view.deliver_ms(index), seq, index, view.random(index))
        )
        return join(message_id, seq, index, view, None, overrides.get(index), self._live)


_items = TimerReads._range
