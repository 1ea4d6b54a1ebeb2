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
- `ready_seq` is 0: a fired message is named by its fire chunk, which comes with the fire
  (step 3). An ACKED or CANCELLED message reports no fired-at (the join's rule).
- `list_pending`'s continuation is the last message's place (deliver ms, segment, index,
  as the fire cursor's bytes), not a wheel key. `floors` and `scan_budget` bound version
  1's walk over per-message wheel keys and their tombstones; here a wheel entry is one a
  (slot, segment), deleted a batch at a time, so the join reads the range's entries
  whole and neither applies.
- `count_pending` is exact to the ms, through the join; the `counts` family the send keeps
  (`timerwheel.store.counts.PendingCounts`, as version 1's Count) answers in whole minutes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_state import NO_TIME_BOUND_MS, BatchStateReader, MessageState
from timerwheel.store.keys import CF_WHEEL
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import PendingPage
from timerwheel.wheels.domain import NO_PROPERTIES, Timer
from timerwheel.wheels.wheel import LEVELS

_SLOT_MS = {wheel.name: wheel.slot_ms for wheel in LEVELS}


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
        found = self.join.list_scheduled(topic, from_ms, to_ms, limit, place)
        views: dict[int, SegmentView] = {}
        timers: list[Timer] = []
        held, last = 0, None
        for one in found:
            view = views.get(one.segment)
            if view is None:
                raw = self._cf[bk.CF_SEGMENTS].get(bk.segment_key(one.segment))
                if raw is None:  # swept between the join's read and this one
                    continue
                view = views[one.segment] = SegmentView(raw)
            timer = to_timer(view, one, include_body)
            size = len(timer.body) + len(timer.topic) + sum(map(len, _flat(timer.properties)))
            if last is not None and held + size > max_bytes:
                return PendingPage(timers, _place_bytes(last))
            held += size
            timers.append(timer)
            last = one
        if found and len(found) == limit:
            return PendingPage(timers, _place_bytes(found[-1]))
        return PendingPage(timers, None)

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
