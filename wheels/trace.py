"""A timer's life as events (`Get` with `include_trace`): the types, and how the events
are put together from what is stored.

Most of a timer's history is already in its record: when it was sent (and, in two bits,
which wheel took it), when it fired, when it was acked or cancelled, and, once acked,
usually its first delivery (the Ack writes it there: timerwheel.delivery.first_deliveries). Writing
those again as events would cost a RocksDB write per message on the hot paths, so only
what the record cannot hold is stored as an event (timerwheel.store.trace): each cascade, a fire
straight out of an upper wheel, each delivery attempt and its failure, reschedules, replacements
and dead-lettering. `assemble` merges the two into one ordered list:

1. the stored events in time order (in one millisecond, moves and fires before
   deliveries, else in the order they were written);
2. SENT at created_at, before everything after it (only what a REPLACE left of the
   versions it replaced is older: their SENT, and CANCELLED for a cancelled one, are
   stored events, so the first send time is never lost);
3. FIRED at fired_at, unless a stored FIRED already says so, after the events that led
   up to it (cascades, a reschedule, an earlier fire of a dead letter) and before those
   that followed (deliveries), even within the same millisecond;
4. ACKED or CANCELLED last: both are final.

Pure: no I/O, no clock.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum


class TraceKind(IntEnum):
    """The values of the public `TraceKind` enum (proto), without its prefix."""

    SENT = 1  # wheel: the wheel it was placed in ("": due at once, or not recorded)
    CASCADED = 2  # from_wheel -> wheel
    FIRED = 3  # wheel: the wheel it fired from
    DELIVERED = 4  # to subscriber, as attempt
    NACKED = 5  # attempt failed; detail: the nack's reason, "ack timeout", "stream ended"
    ACKED = 6
    CANCELLED = 7
    RESCHEDULED = 8  # deliver_at_ms: the new time; wheel: the wheel placed in
    DEAD_LETTERED = 9  # detail: the dead-letter topic
    REPLACED = 10  # a send with if_exists REPLACE stored a new version; wheel: its placement
    REDRIVEN = 11  # a dead letter moved back; detail: the topic it went back to
    PAUSED = 12  # a series was paused: its occurrences are skipped until it is resumed
    RESUMED = 13  # a paused series was resumed


# Moves to another topic, after which the message fires anew there: its attempts start
# again, and the record's fire time is that new fire's.
TOPIC_MOVES = frozenset({TraceKind.DEAD_LETTERED, TraceKind.REDRIVEN})


@dataclass(frozen=True, slots=True)
class TraceEvent:
    kind: TraceKind
    at_ms: int
    wheel: str = ""
    from_wheel: str = ""
    attempt: int = 0
    subscriber: str = ""
    detail: str = ""
    deliver_at_ms: int = 0


# SENT and CANCELLED are stored only for a version a REPLACE superseded (its record held
# them), written in the order they happened, before the REPLACED that followed.
_MOVES = frozenset(
    {TraceKind.CASCADED, TraceKind.RESCHEDULED, TraceKind.REPLACED, TraceKind.FIRED,
     TraceKind.SENT, TraceKind.CANCELLED}
)  # fmt: skip
# Stored kinds that, within the same millisecond, happened before a synthesized event.
_BEFORE_SENT = frozenset({TraceKind.REPLACED})
_BEFORE_FIRE = frozenset(
    {TraceKind.CASCADED, TraceKind.RESCHEDULED, TraceKind.REPLACED, TraceKind.DEAD_LETTERED,
     TraceKind.REDRIVEN, TraceKind.FIRED}
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class RecordFacts:
    """What a timer's record says about its history (0: did not happen)."""

    created_at_ms: int
    placed_in: str  # the wheel the send placed it in; "" when due at once or unknown
    fired_at_ms: int = 0
    acked_at_ms: int = 0
    cancelled_at_ms: int = 0
    # The first delivery, when the Ack wrote it into the record (timerwheel.store.records, version
    # 2) instead of a stored event: its time and subscriber (0, "": not there).
    first_delivered_at_ms: int = 0
    first_delivered_to: str = ""


def assemble(facts: RecordFacts, stored: list[TraceEvent]) -> tuple[TraceEvent, ...]:
    """The whole trace, oldest first (see the module docstring for the order)."""
    if facts.first_delivered_at_ms:  # in the record: it was the last event written before
        first = TraceEvent(  # the Ack (any other of the message's wrote it out first)
            TraceKind.DELIVERED, facts.first_delivered_at_ms, attempt=1,
            subscriber=facts.first_delivered_to,
        )  # fmt: skip
        stored = [*stored, first]
    events = _in_time_order(stored)
    if facts.fired_at_ms and not _fire_stored(stored, facts.fired_at_ms):
        wheel = _wheel_at(facts, events, facts.fired_at_ms)
        fired = TraceEvent(TraceKind.FIRED, facts.fired_at_ms, wheel=wheel)
        _insert(events, fired, _BEFORE_FIRE)
    sent = TraceEvent(TraceKind.SENT, facts.created_at_ms, wheel=facts.placed_in)
    _insert(events, sent, _BEFORE_SENT)
    if facts.acked_at_ms:
        events.append(TraceEvent(TraceKind.ACKED, facts.acked_at_ms))
    if facts.cancelled_at_ms:
        events.append(TraceEvent(TraceKind.CANCELLED, facts.cancelled_at_ms))
    return tuple(events)


def attempts_made(events: tuple[TraceEvent, ...] | list[TraceEvent]) -> int:
    """Delivery attempts in its current topic: the highest attempt delivered or failed
    since it was last dead-lettered (0: none recorded there). A failed attempt counts
    too: with `Settings.trace_first_deliveries` off, a first attempt that failed is
    known only by its NACKED event."""
    made = 0
    for event in events:
        if event.kind in (TraceKind.DELIVERED, TraceKind.NACKED):
            made = max(made, event.attempt)
        elif event.kind in TOPIC_MOVES:
            made = 0
    return made


def _in_time_order(stored: list[TraceEvent]) -> list[TraceEvent]:
    """`stored` sorted by `_time_order`, except that a fire written right after a move to
    another topic in the same millisecond (a dead letter's or a redriven message's fire,
    written down when it moved on: timerwheel.engine.bulk_ops) stays after that move."""
    keys = []
    for index, event in enumerate(stored):
        at_ms, rank = _time_order(event)
        before = stored[index - 1] if index else None
        if (
            event.kind is TraceKind.FIRED and before is not None
            and before.kind in TOPIC_MOVES and before.at_ms == at_ms
        ):  # fmt: skip
            rank = 1
        keys.append((at_ms, rank))
    order = sorted(range(len(stored)), key=keys.__getitem__)
    return [stored[i] for i in order]


def _time_order(event: TraceEvent) -> tuple[int, int]:
    """Time, and within a millisecond what moves or fires a timer before what delivers
    it; `sorted` keeps write order beyond that. (A dead letter's first fire is written
    at the move, after its deliveries, with the time it happened.)"""
    return event.at_ms, 0 if event.kind in _MOVES else 1


def fire_stored(stored: list[TraceEvent], fired_at_ms: int) -> bool:
    """Whether a stored event already says the record's fire at `fired_at_ms`."""
    return _fire_stored(stored, fired_at_ms)


def _fire_stored(stored: list[TraceEvent], fired_at_ms: int) -> bool:
    """A stored event already says the record's fire (one written since the last
    dead-lettering: those before it are fires into the old topic)."""
    since = len(stored)
    while since and stored[since - 1].kind not in TOPIC_MOVES:
        since -= 1
    return any(e.kind is TraceKind.FIRED and e.at_ms == fired_at_ms for e in stored[since:])


def _insert(events: list[TraceEvent], event: TraceEvent, after_kinds: frozenset) -> None:
    """Put `event` (into time-ordered `events`) after the last event that precedes it: one
    before its time, or one at its time of a kind in `after_kinds`."""
    position = 0
    for index, other in enumerate(events):
        if other.at_ms > event.at_ms:
            break
        if other.at_ms < event.at_ms or other.kind in after_kinds:
            position = index + 1
    events.insert(position, event)


def _wheel_at(facts: RecordFacts, events: list[TraceEvent], fired_at_ms: int) -> str:
    """The wheel a timer was in when it fired: where the last move before the fire put
    it; "" for a dead letter, which fires into its new topic without a wheel."""
    wheel = facts.placed_in
    for event in events:
        if event.at_ms > fired_at_ms:
            break
        if event.kind in (TraceKind.CASCADED, TraceKind.RESCHEDULED):
            wheel = event.wheel
        elif event.kind is TraceKind.REPLACED:  # the new version's placement (older
            wheel = event.wheel or facts.placed_in  # events did not store it)
        elif event.kind in TOPIC_MOVES:
            wheel = ""
    return wheel
