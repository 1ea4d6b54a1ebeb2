"""The store's half of bulk cancel, purge and redrive (timerwheel.wheels.bulk): finding the
messages a filter selects, a bounded page at a time, and the staged writes of a purge.

Reads run on the caller's thread and see committed data; the writer checks each id
again when it applies the change (timerwheel.engine.bulk_ops). Where a scan looks:

| filter                        | scanned, in this order                                  |
|-------------------------------|---------------------------------------------------------|
| series_id                     | `messages`: the id itself, then the ids "<id>#..."       |
| id_prefix (no series_id)      | `messages`: the ids starting with it                     |
| otherwise (topic, time range) | the wheels merged by time over [from_ms, to_ms), then    |
|                               | (purge only) `ready`: the topic's entries, or all        |
| Redrive                       | `ready`: the dead-letter topic's entries                 |

A page token says which of these scans to continue and after which key
(`encode_cursor`), so a call never rescans what an earlier one passed.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from heapq import merge

from timerwheel.common import State
from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.timer_reads import LIST_READ_CHUNK, TimerReads
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.bulk import DEAD_LETTER_ORIGIN, SERIES_SEPARATOR, TimerFilter
from timerwheel.wheels.domain import InvalidArgument

# The scans of a page token, in the order a call runs them.
BY_ID, BY_WHEEL, BY_READY = b"i", b"w", b"r"
Cursor = tuple[bytes, bytes]  # (scan, the last key it examined)


def encode_cursor(cursor: Cursor | None) -> str:
    if cursor is None:
        return ""
    scan, key = cursor
    return base64.urlsafe_b64encode(scan + key).decode()


def decode_cursor(token: str, field: str = "page_token") -> Cursor | None:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token.encode())
    except ValueError as exc:
        raise InvalidArgument(field, token, "is not a token this server issued") from exc
    if len(raw) < 2 or raw[:1] not in (BY_ID, BY_WHEEL, BY_READY):
        raise InvalidArgument(field, token, "is not a token this server issued")
    return raw[:1], raw[1:]


class Selection:
    """The ids one call acts on: at most `limit`, after at most `budget` keys examined.

    Once it holds `limit` it reads on to the next match (within the budget) without
    taking it, so `next` is None exactly when nothing more matches; it is left set, and
    `more` may be wrong, only when the budget ran out first."""

    def __init__(self, limit: int, budget: int) -> None:
        self.ids: list[str] = []
        self.limit = limit
        self.budget = budget
        self.next: Cursor | None = None  # where the next call continues; None: done
        self._passed: Cursor | None = None  # the last row examined and dealt with

    def take(self, scan: bytes, rows: Iterator[tuple[bytes, str | None]]) -> bool:
        """Examine (key, id or None) rows of one scan; False when this call must stop."""
        for key, message_id in rows:
            if message_id is not None and len(self.ids) >= self.limit:
                self.next = self._passed  # a match beyond the limit: the next call's
                return False
            self.budget -= 1
            if message_id is not None:
                self.ids.append(message_id)
            self._passed = (scan, key)
            if self.budget <= 0:
                self.next = self._passed
                return False
        return True


def select(
    reads: TimerReads, f: TimerFilter, *, fired: bool, floors: dict[str, bytes],
    cursor: Cursor | None, limit: int, budget: int,
) -> Selection:  # fmt: skip
    """Ids of messages `f` selects that a bulk cancel (SCHEDULED) or, with `fired`, a
    purge (FIRED too) would change, from `cursor` on."""
    selection = Selection(limit, budget)
    states = (State.SCHEDULED, State.FIRED) if fired else (State.SCHEDULED,)
    if f.series_id or f.id_prefix:
        after = cursor[1] if cursor else None
        selection.take(BY_ID, _by_id(reads, f, states, after))
        return selection
    scans = [BY_WHEEL, BY_READY] if fired else [BY_WHEEL]
    if cursor is not None:
        scans = scans[scans.index(cursor[0]) :] if cursor[0] in scans else []
    for scan in scans:
        after = cursor[1] if cursor is not None and cursor[0] == scan else None
        if scan == BY_WHEEL:
            rows = _by_wheel(reads, f, floors, after)
        else:
            rows = _by_ready(reads, f, after)
        if not selection.take(scan, rows):
            break
    return selection


def select_dead_letters(
    reads: TimerReads, dlq_topic: str, f: TimerFilter, cursor: Cursor | None, limit: int,
    budget: int,
) -> Selection:  # fmt: skip
    """Ids of the dead letters on `dlq_topic` that `f` selects (its topic: the one they
    came from), from `cursor` on."""
    selection = Selection(limit, budget)
    prefix = keys.ready_prefix(dlq_topic)
    lo = prefix if cursor is None else max(prefix, cursor[1] + b"\x00")
    entries = reads._range(reads._ready, lo, keys.prefix_end(prefix))
    selection.take(BY_READY, _records_of(reads, entries, _dead_letter_match(f)))
    return selection


def _dead_letter_match(f: TimerFilter):
    def match(message_id: str, raw: bytes) -> bool:
        if not records.is_fired(raw):
            return False
        timer = records.decode_timer(message_id, raw)
        origin = timer.properties.get(DEAD_LETTER_ORIGIN)
        return bool(origin) and f.matches(message_id, origin, timer.deliver_at_ms)

    return match


def _by_id(
    reads: TimerReads, f: TimerFilter, states: tuple[State, ...], after: bytes | None
) -> Iterator[tuple[bytes, str | None]]:
    """(id, id if selected) over the id ranges the filter names, in key order."""
    if f.series_id:
        series = f.series_id.encode()
        occurrences = series + SERIES_SEPARATOR.encode()
        ranges = [(series, series + b"\x00"), (occurrences, keys.prefix_end(occurrences))]
    else:
        prefix = f.id_prefix.encode()
        ranges = [(prefix, keys.prefix_end(prefix))]
    for lo, hi in ranges:
        if after is not None:
            if after >= hi:
                continue
            lo = max(lo, after + b"\x00")
        for key, raw in reads._range(reads._messages, lo, hi):
            message_id = key.decode()
            selected = records.record_state(raw) in states and f.matches(
                message_id, records.record_topic(raw), records.record_deliver_at_ms(raw)
            )
            yield key, message_id if selected else None


def _by_wheel(
    reads: TimerReads, f: TimerFilter, floors: dict[str, bytes], after: bytes | None
) -> Iterator[tuple[bytes, str | None]]:
    """(wheel key, id if selected) of the three wheels merged by time, over the filter's
    time range; `floors` skip what holds only tombstones (as List does).

    Each wheel's iterator sees its family as of its first step, and `merge` takes those
    steps in the order given: hour, then minute, then second (`keys.CF_WHEEL`). Cascades
    move keys only downwards, so a key a cascade moves meanwhile is seen twice (the
    operation takes an id once), never missed."""
    lo = keys.time_bound(f.from_ms)
    if after is not None:
        lo = max(lo, after + b"\x00")
    hi = keys.time_bound(f.to_ms or keys.NO_TIME_BOUND_MS)
    streams = [
        reads._range(reads._wheels[name], max(lo, floors.get(name, lo)), hi)
        for name in keys.CF_WHEEL  # upper wheels first: see above
    ]
    wanted = f.topic.encode()
    for key, topic in merge(*streams):
        if wanted and topic != wanted:
            yield key, None
            continue
        message_id = keys.wheel_key_ids([key])[0].decode()
        selected = f.matches(message_id, topic.decode(), keys.key_time_ms(key))
        yield key, message_id if selected else None


def _by_ready(
    reads: TimerReads, f: TimerFilter, after: bytes | None
) -> Iterator[tuple[bytes, str | None]]:
    """(ready key, id if selected) of the fired, un-acked messages: the topic's, or all."""
    if f.topic:
        prefix = keys.ready_prefix(f.topic)
        lo, hi = prefix, keys.prefix_end(prefix)
    else:
        lo, hi = b"", None
    if after is not None:
        lo = max(lo, after + b"\x00")

    def match(message_id: str, raw: bytes) -> bool:
        return records.is_fired(raw) and f.matches(
            message_id, records.record_topic(raw), records.record_deliver_at_ms(raw)
        )

    yield from _records_of(reads, reads._range(reads._ready, lo, hi), match)


def _records_of(reads: TimerReads, entries, match) -> Iterator[tuple[bytes, str | None]]:
    """(key, id if `match(id, record)`) of (key, id) entries, their records read a few at
    a time."""
    chunk: list[tuple[bytes, bytes]] = []
    for entry in entries:
        chunk.append(entry)
        if len(chunk) == LIST_READ_CHUNK:
            yield from _matched(reads, chunk, match)
            chunk = []
    yield from _matched(reads, chunk, match)


def _matched(reads: TimerReads, chunk, match) -> Iterator[tuple[bytes, str | None]]:
    if not chunk:
        return
    raws = reads._messages.get([message_id for _, message_id in chunk])
    for (key, message_id), raw in zip(chunk, raws, strict=True):
        name = message_id.decode()
        yield key, name if raw is not None and match(name, raw) else None


# == staged writes (writer thread only) ================================================
def stage_purge_fired(
    store: TimerStore, batch: StagedBatch, message_id: bytes, raw: bytes, now_ms: int,
    expire_at_ms: int,
) -> None:  # fmt: skip
    """A FIRED message purged: its `ready` entry out (the fired cache forgets it), the
    record CANCELLED (kept for the retention like any cancelled timer)."""
    batch.remove_ready(records.record_topic(raw), records.record_ready_seq(raw))
    batch.records[message_id] = records.with_transition(
        raw, State.CANCELLED, cancelled_at_ms=now_ms
    )
    store.stage_expiry(batch, expire_at_ms, [message_id])
    batch.operations += 1
