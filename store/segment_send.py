"""The send of the batch-level layout (decision 0014, step 2): a group commit's new
messages staged as segments, wheel entries a (slot, segment), `ids` entries and counts.

One writer for the product and the tests (`tests/helpers/batch_v2.py` sends through it).
What it stages for the sends of one group commit:

- **Segments.** The sends are grouped by the wheel their caller placed them in, each group
  ordered by deliver time (stable: sends due in the same ms keep their order) and cut
  into segments of at most `segment_max` (and of at most 256 topics). A segment then
  holds messages of adjacent slots of one wheel, so its messages tend to turn terminal
  together, while sends spread over weeks still fill whole segments instead of making a
  segment a slot. The index order is the deliver order, which makes each wheel entry a
  slice of the segment's columns, already sorted.
- **Wheel entries**, one a (slot of its wheel, segment): the segment's (deliver ms, index)
  pairs due in that slot. A new segment's keys are new, so nothing is read or merged.
- **Ids.** A server-made id is 46 hex digits (`timerwheel.store.segment_ids`): the deliver
  time, the segment, the index and 80 random bits, which the segment's ids column keeps.
  A send with a client-chosen id keeps it in the segment's sparse part and gets an `ids`
  entry (client id -> segment, index); whether the id may be used (KEEP, REPLACE, a
  repeat in one call) is the caller's to decide before it stages, with `client_place`.
  An `ids` entry staged here replaces an older one, as a REPLACE needs.
- **Counts**: the pending counters' minute deltas (`timerwheel.store.counts`), as the
  version-1 send stages them.
- **`meta`**: the last segment seq, so a reopened store continues above it.

The fire (`timerwheel.store.segment_fire`) is told of each upper-wheel entry staged
(`placed`), so that it walks an upper wheel only when a slot has started or an entry came.

A send's deliver time must be at or after the fire cursor's, which the state join's rule
needs (`timerwheel.store.batch_state`): a new segment's seq is above every fired one, so
its places then follow the cursor. A send already due is placed by its caller in the
second wheel; a fire staged after it into the same batch fires it in that commit, as
version 1 fires it at once (`timerwheel.store.segment_fire` reads what the batch stages).
"""

from __future__ import annotations

import os
from bisect import bisect_left
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from operator import itemgetter, sub
from typing import Any, NamedTuple, TypeVar

from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.segment_ids import RANDOM_BYTES, segment_ids
from timerwheel.store.segments import (
    MAX_TOPICS,
    SEGMENT_MAX,
    Extras,
    column_bytes,
    encode_segment,
)
from timerwheel.wheels.domain import When, WhenKind
from timerwheel.wheels.wheel import LEVELS

SLOT_MS = {wheel.name: wheel.slot_ms for wheel in LEVELS}
_SEQ_BYTES = keys.U64
T = TypeVar("T")


class NewSends(NamedTuple):
    """A group commit's new messages, a column a field, a send a position."""

    topics: Sequence[str]
    bodies: Sequence[bytes]
    deliver_ms: Sequence[int]
    wheels: Sequence[str]  # "second", "minute" or "hour": where the caller placed each
    # The `when` each send asked for; None: every one a DELAY of deliver minus created.
    whens: Sequence[When] | None = None
    # By position, for the few sends with a client-chosen id, properties or flags.
    extras: Mapping[int, Extras] | None = None


class SentSegment(NamedTuple):
    """One segment a stage made: its seq and the send positions it holds, by index."""

    seq: int
    positions: list[int]


class StagedSends(NamedTuple):
    ids: list[str]  # by send position: its server-made id, or the id its client chose
    segments: list[SentSegment]


class SegmentSender:
    """Stages a group commit's sends into a version-2 store's families (by name, as
    `timerwheel.store.batch_state` reads them). For the one writer thread."""

    def __init__(
        self, families: Mapping[str, Any], segment_max: int = SEGMENT_MAX,
        randbytes: Callable[[int], bytes] = os.urandom,
        placed: Callable[[str, int], None] | None = None,
    ) -> None:  # fmt: skip
        if not 0 < segment_max <= SEGMENT_MAX:
            raise ValueError(f"segment_max must be 1..{SEGMENT_MAX}, not {segment_max}")
        self._cf, self.segment_max, self._randbytes = families, segment_max, randbytes
        self._placed = placed  # (wheel, earliest slot start ms) of each upper entry staged
        raw = families[bk.CF_META].get(bk.META_SEGMENT_SEQ)
        self.segment_seq = 0 if raw is None else keys.decode_u64(raw)

    def client_place(self, batch: StagedBatch, client_id: str) -> tuple[int, int] | None:
        """(segment, index) of the message a client id names, as this batch leaves it."""
        key = bk.ids_key(client_id)
        staged = batch.writes[bk.CF_IDS]
        raw = staged[key] if key in staged else self._cf[bk.CF_IDS].get(key)
        return None if raw is None else be.decode_place(raw)

    def stage(self, batch: StagedBatch, sends: NewSends, created_ms: int) -> StagedSends:
        """Stage `sends` (at least one) into `batch`; ValueError, staging nothing, when a
        send's columns or times do not make one."""
        n = len(sends.deliver_ms)
        columns = (
            sends.topics,
            sends.bodies,
            sends.wheels,
            *([sends.whens] if sends.whens else []),
        )
        if not n or any(len(c) != n for c in columns):
            raise ValueError(f"{n} deliver times and columns of {[len(c) for c in columns]}")
        unknown = set(sends.wheels) - SLOT_MS.keys()
        if unknown:
            raise ValueError(f"wheels {sorted(unknown)} are not {sorted(SLOT_MS)}")
        cursor_ms = self._cursor_ms(batch)
        if min(sends.deliver_ms) < cursor_ms:
            raise ValueError(
                f"deliver time {min(sends.deliver_ms)} is before the fire cursor's "
                f"{cursor_ms}: a send already due is placed at or after it"
            )
        chunks = [
            chunk
            for group in _by_wheel(sends.wheels, sends.deliver_ms)
            for chunk in _cut(group, sends.topics, self.segment_max)
        ]
        ids: list[str] = [""] * n
        made = []
        writes = batch.writes
        for positions in chunks:
            self.segment_seq += 1
            seq = self.segment_seq
            value, deliver, randoms = self._segment(sends, positions, created_ms)
            writes[bk.CF_SEGMENTS][bk.segment_key(seq)] = value
            wheel = sends.wheels[positions[0]]
            _stage_wheel(writes[bk.CF_WHEEL[wheel]], seq, deliver, SLOT_MS[wheel])
            if self._placed is not None and wheel != "second":
                self._placed(wheel, deliver[0] - deliver[0] % SLOT_MS[wheel])
            for position, raw in zip(positions, segment_ids(deliver, seq, randoms), strict=True):
                ids[position] = raw.decode()
            made.append(SentSegment(seq, positions))
        if sends.extras:
            self._stage_client_ids(writes[bk.CF_IDS], sends.extras, made, ids)
        deltas = batch.count_deltas
        tally = keys.count_bucket_tally(_encoded(sends.topics), sends.deliver_ms)
        for bucket, timers in tally.items():
            deltas[bucket] = deltas.get(bucket, 0) + timers
        writes[bk.CF_META][bk.META_SEGMENT_SEQ] = _SEQ_BYTES.pack(self.segment_seq)
        batch.operations += n
        return StagedSends(ids, made)

    def _cursor_ms(self, batch: StagedBatch) -> int:
        """The fire cursor's deliver ms as this batch leaves it; -1 before any fire."""
        staged = batch.writes[bk.CF_META]
        key = bk.META_FIRE_CURSOR
        raw = staged[key] if key in staged else self._cf[bk.CF_META].get(key)
        return -1 if raw is None else be.decode_cursor(raw)[0]

    def _segment(
        self, sends: NewSends, positions: list[int], created_ms: int
    ) -> tuple[bytes, list[int], bytes]:
        """(value, deliver column, ids column) of the segment of `positions`."""
        topics = _pick(sends.topics, positions)
        table = {topic: i for i, topic in enumerate(dict.fromkeys(topics))}
        deliver = _pick(sends.deliver_ms, positions)
        randoms = self._randbytes(RANDOM_BYTES * len(positions))
        kind, extras = _whens(sends, positions, deliver, created_ms)
        if sends.extras:
            for index, position in enumerate(positions):
                found = sends.extras.get(position)
                if found is not None:
                    own = extras.get(index)
                    extras[index] = found if own is None else found._replace(when=own.when)
        value = encode_segment(
            created_ms, tuple(table),
            bytes(len(topics)) if len(table) == 1 else bytes(map(table.__getitem__, topics)),
            deliver, _pick(sends.bodies, positions), randoms, extras, kind,
        )  # fmt: skip
        return value, deliver, randoms

    def _stage_client_ids(
        self, staged: dict[bytes, bytes | None], extras: Mapping[int, Extras],
        made: list[SentSegment], ids: list[str],
    ) -> None:  # fmt: skip
        where = {
            position: (segment.seq, index)
            for segment in made
            for index, position in enumerate(segment.positions)
            if position in extras
        }
        for position, found in extras.items():
            if found.client_id is not None:
                staged[bk.ids_key(found.client_id)] = be.place_value(*where[position])
                ids[position] = found.client_id


def _encoded(topics: Sequence[str]) -> list[bytes]:
    """The topics as bytes; a commit of one topic encodes it once."""
    if topics.count(topics[0]) == len(topics):
        return [topics[0].encode()] * len(topics)
    return [topic.encode() for topic in topics]


def _pick(column: Sequence[T], positions: Sequence[int]) -> list[T]:
    """The items of `column` at `positions`, in order: one C call (`itemgetter`), where
    `map(column.__getitem__, ...)` makes a call a message."""
    if len(positions) == 1:
        return [column[positions[0]]]
    return list(itemgetter(*positions)(column))


def _by_wheel(wheels: Sequence[str], deliver_ms: Sequence[int]) -> list[list[int]]:
    """The send positions grouped by wheel, each group by deliver time (stable)."""
    groups: list[Sequence[int]]
    if wheels.count(wheels[0]) == len(wheels):
        groups = [range(len(wheels))]
    else:
        by: dict[str, list[int]] = {}
        for position, wheel in enumerate(wheels):
            by.setdefault(wheel, []).append(position)
        groups = [by[name] for name in SLOT_MS if name in by]
    return [sorted(group, key=deliver_ms.__getitem__) for group in groups]


def _cut(group: list[int], topics: Sequence[str], segment_max: int) -> list[list[int]]:
    """A group's positions in segments of at most `segment_max` sends and MAX_TOPICS topics."""
    out = []
    for first in range(0, len(group), segment_max):
        chunk = group[first : first + segment_max]
        if len(set(map(topics.__getitem__, chunk))) <= MAX_TOPICS:
            out.append(chunk)
        else:  # rare: more topics than a table holds; halves until each fits
            half = len(chunk) // 2
            out += _cut(chunk[:half], topics, half) + _cut(chunk[half:], topics, half)
    return out


def _whens(
    sends: NewSends, positions: list[int], deliver: list[int], created_ms: int
) -> tuple[WhenKind, dict[int, Extras]]:
    """The segment's usual kind, and the sparse `when` of each message it does not give.

    DELAY is the usual kind unless most of the segment's messages are DELIVER_AT: then a
    message's `when` follows from the column (a delay: deliver minus the segment's created
    ms), and only the others are kept beside it."""
    if sends.whens is None:
        return WhenKind.DELAY, {}
    whens = list(map(sends.whens.__getitem__, positions))
    kinds = [when.kind for when in whens]
    kind = (
        WhenKind.DELIVER_AT if 2 * kinds.count(WhenKind.DELIVER_AT) > len(kinds) else WhenKind.DELAY
    )
    derived = (
        deliver if kind is WhenKind.DELIVER_AT else list(map(sub, deliver, repeat(created_ms)))
    )
    if kinds.count(kind) == len(kinds) and [when.value for when in whens] == derived:
        return kind, {}  # the usual case: every `when` is the column's, checked in C
    return kind, {
        index: Extras(when=when)
        for index, (when, value) in enumerate(zip(whens, derived, strict=True))
        if when.kind != kind or when.value != value
    }


def _stage_wheel(
    staged: dict[bytes, bytes | None], seq: int, deliver: list[int], slot_ms: int
) -> None:
    """The segment's wheel entries, one a slot: runs of its sorted deliver column."""
    times = column_bytes("q", deliver)
    at, n = 0, len(deliver)
    while at < n:
        start = deliver[at] - deliver[at] % slot_ms
        end = bisect_left(deliver, start + slot_ms, at)
        staged[bk.wheel_entry_key(start, seq)] = be.wheel_entry_run(times, at, end)
        at = end
