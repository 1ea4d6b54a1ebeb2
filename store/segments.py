"""The `segments` value of the batch-level layout (decision 0014; version 2, planned).

A group commit's sends become segments of at most ``SEGMENT_MAX`` messages; everything
else refers to a message as (segment seq, index). A segment is written once and never
patched: state lives in the other families (``timerwheel.store.batch_entries``), and
what a rare operation changes lives in ``overrides``. Columns, so that the send packs a
segment with a few C calls and a reader takes one message without decoding the rest:

=============  ==========================  ===============================================
part           bytes                       what
=============  ==========================  ===============================================
head           16: ``<BBHIq``              layout version (1), the segment's usual when
                                           kind (DELIVER_AT or DELAY), topics in table,
                                           messages n, created ms (one a group commit)
topic table    per topic: u16 + UTF-8      the segment's topics (at most 256)
ids column     n x 10                      the random part of each server-made id
                                           (`timerwheel.store.segment_ids`): the rest of
                                           an id is the deliver time, the seq, the index
deliver ms     n x i64                     as the send gave it (the id's time); a
                                           Reschedule is an override, never a patch
topic indexes  n x u8                      into the topic table
body ends      n x u32                     body i is ``bodies[ends[i-1]:ends[i]]``
sparse         u32 byte length, entries    the few messages with more (`Extras`): per
                                           entry u16 index, u8 which-fields, then flags
                                           u8, when (u8 kind + i64 value), client id
                                           (u16 + UTF-8), properties (as records.py's)
bodies         the rest                    concatenated, in index order
=============  ==========================  ===============================================

Integers in values are little-endian (packed by `struct`, read as `array`s, which a
big-endian machine swaps), keys big-endian (``timerwheel.store.batch_keys``). A message's
``when`` is the segment's kind with its value derived (DELIVER_AT: the deliver time;
DELAY: deliver minus created) unless its sparse entry says otherwise (a delay level, or
a kind other than the segment's). A client-chosen id is kept in the sparse part too,
since the ids column holds only the random part of a server-made one. Such a message
is found by its `ids` entry; its random part is drawn as any other's but never handed
out, so no server-made id can be made up that reaches it.
"""

from __future__ import annotations

import struct
import sys
from array import array
from collections.abc import Mapping, Sequence
from itertools import accumulate
from typing import NamedTuple

from timerwheel.store.segment_ids import MAX_INDEX, RANDOM_BYTES, ServerId, segment_ids
from timerwheel.wheels.domain import When, WhenKind

SEGMENT_VERSION = 1
SEGMENT_MAX = 1024  # messages a segment: what a Get by id reads at most (decision 0014)
MAX_TOPICS = 256  # a topic index is one byte
_HEAD = struct.Struct("<BBHIq")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_ENDS_PAIR = struct.Struct("<II")
_I64 = struct.Struct("<q")
_SPARSE_HEAD = struct.Struct("<HBB")  # index, which fields, flags
_WHEN = struct.Struct("<Bq")
_HAS_WHEN, _HAS_ID, _HAS_PROPERTIES = 1, 2, 4
_SWAP = sys.byteorder != "little"
# The kinds whose value follows from the deliver and created times: a segment's usual kind
# is one of them, and a message of another (a delay level) has its `when` in `Extras`.
_DERIVABLE = (WhenKind.DELIVER_AT, WhenKind.DELAY)


class Extras(NamedTuple):
    """What a few messages carry beyond the columns (absent: the defaults)."""

    flags: int = 0  # the engine's bits (e.g. it has an `extras` entry)
    when: When | None = None  # None: derived from the segment's kind
    client_id: str | None = None  # the id a client chose (or a restore brought in)
    properties: Mapping[str, str] = {}


class Segment(NamedTuple):
    """A segment decoded whole (`decode_segment`); readers use `SegmentView`."""

    created_ms: int
    when_kind: WhenKind
    topics: tuple[str, ...]
    topic_indexes: bytes
    deliver_ms: list[int]
    randoms: bytes
    bodies: list[bytes]
    extras: dict[int, Extras]


def column(typecode: str, raw: bytes | memoryview) -> array:
    """A little-endian column as an array of `typecode`."""
    out = array(typecode, raw)
    if _SWAP:
        out.byteswap()
    return out


def column_bytes(typecode: str, values: Sequence[int]) -> bytes:
    """Integers as a little-endian column of `typecode` (`struct`, which converts each
    int in C: `array`'s constructor parses some item types a call each, several times
    the cost)."""
    return struct.pack(f"<{len(values)}{typecode}", *values)


def encode_segment(
    created_ms: int,
    topics: Sequence[str],
    topic_indexes: bytes,
    deliver_ms: Sequence[int],
    bodies: Sequence[bytes],
    randoms: bytes,
    extras: Mapping[int, Extras] | None = None,
    when_kind: WhenKind = WhenKind.DELAY,
) -> bytes:
    """One segment's value; ValueError when the columns do not make one."""
    n = len(deliver_ms)
    if not 0 < n <= MAX_INDEX + 1:
        raise ValueError(f"a segment holds 1 to {MAX_INDEX + 1} messages, not {n}")
    if not 0 < len(topics) <= MAX_TOPICS:
        raise ValueError(f"a segment's topic table holds 1 to {MAX_TOPICS}, not {len(topics)}")
    if len(bodies) != n or len(topic_indexes) != n or len(randoms) != RANDOM_BYTES * n:
        raise ValueError(
            f"columns of unequal length: {n} deliver times, {len(bodies)} bodies, "
            f"{len(topic_indexes)} topic indexes, {len(randoms)} random bytes"
        )
    if when_kind not in _DERIVABLE:
        raise ValueError(f"a segment's when kind is DELIVER_AT or DELAY, not {when_kind!r}")
    if max(topic_indexes) >= len(topics):
        raise ValueError(f"topic index {max(topic_indexes)} outside a table of {len(topics)}")
    ends = list(accumulate(map(len, bodies)))
    total = ends[-1]
    if total > 0xFFFFFFFF:
        raise ValueError(f"a segment's bodies total {total} bytes, over 4 GiB")
    table = b"".join(_U16.pack(len(t)) + t for t in map(str.encode, topics))
    sparse = _encode_sparse(extras or {}, n)
    return b"".join(
        (
            _HEAD.pack(SEGMENT_VERSION, when_kind, len(topics), n, created_ms),
            table,
            randoms,
            column_bytes("q", deliver_ms),
            topic_indexes,
            column_bytes("I", ends),
            _U32.pack(len(sparse)),
            sparse,
            *bodies,
        )
    )


def _encode_sparse(extras: Mapping[int, Extras], n: int) -> bytes:
    parts = []
    for index in sorted(extras):
        if not 0 <= index < n:
            raise ValueError(f"extras for index {index} of a segment of {n}")
        flags, when, client_id, properties = extras[index]
        which = (
            (_HAS_WHEN if when is not None else 0)
            | (_HAS_ID if client_id is not None else 0)
            | (_HAS_PROPERTIES if properties else 0)
        )
        parts.append(_SPARSE_HEAD.pack(index, which, flags))
        if when is not None:
            parts.append(_WHEN.pack(when.kind, when.value))
        if client_id is not None:
            parts.append(_str16(client_id))
        if properties:
            parts.append(_U16.pack(len(properties)))
            for key, value in properties.items():
                raw = value.encode()
                parts += [_str16(key), _U32.pack(len(raw)), raw]
    return b"".join(parts)


def _str16(text: str) -> bytes:
    raw = text.encode()
    if len(raw) > 0xFFFF:
        raise ValueError(f"{text!r:.40} is over {0xFFFF} bytes")
    return _U16.pack(len(raw)) + raw


class SegmentView:
    """A segment's value read in place: the head and offsets at once, a column or the
    sparse part only when asked for, one message's parts by index (Get, fetch, Ack)."""

    __slots__ = (
        "_bodies",
        "_deliver",
        "_ends",
        "_ends_column",
        "_extras",
        "_randoms",
        "_sparse_at",
        "_topic_idx",
        "created_ms",
        "n",
        "topics",
        "value",
        "when_kind",
    )  # fmt: skip

    def __init__(self, value: bytes) -> None:
        version, kind, topic_count, n, created_ms = _HEAD.unpack_from(value)
        if version != SEGMENT_VERSION:
            raise ValueError(f"segment layout version {version}, this code reads {SEGMENT_VERSION}")
        self.value, self.n, self.created_ms = value, n, created_ms
        self.when_kind = WhenKind(kind)
        at, topics = _HEAD.size, []
        for _ in range(topic_count):
            (length,) = _U16.unpack_from(value, at)
            topics.append(value[at + 2 : at + 2 + length].decode())
            at += 2 + length
        self.topics = tuple(topics)
        self._randoms = at
        self._deliver = at = at + RANDOM_BYTES * n
        self._topic_idx = at = at + 8 * n
        self._ends = at = at + n
        self._sparse_at = at = at + 4 * n
        (sparse_len,) = _U32.unpack_from(value, at)
        self._bodies = at + 4 + sparse_len
        self._ends_column: array | None = None
        self._extras: dict[int, Extras] | None = None

    def random(self, index: int) -> bytes:
        at = self._randoms + RANDOM_BYTES * index
        return self.value[at : at + RANDOM_BYTES]

    def deliver_ms(self, index: int) -> int:
        return _I64.unpack_from(self.value, self._deliver + 8 * index)[0]

    def topic(self, index: int) -> str:
        return self.topics[self.value[self._topic_idx + index]]

    def body(self, index: int) -> bytes:
        """One message's body: two offsets read, nothing else decoded."""
        if not 0 <= index < self.n:
            raise IndexError(f"index {index} of a segment of {self.n}")
        if index:
            start, end = _ENDS_PAIR.unpack_from(self.value, self._ends + 4 * index - 4)
        else:
            start, (end,) = 0, _U32.unpack_from(self.value, self._ends)
        return self.value[self._bodies + start : self._bodies + end]

    def bodies(self, indexes: Sequence[int]) -> list[bytes]:
        """Many messages' bodies (a fetch): the ends column decoded once for the segment."""
        ends = self._ends_column
        if ends is None:
            ends = self._ends_column = column("I", self.value[self._ends : self._sparse_at])
            ends.insert(0, 0)
        value, base = self.value, self._bodies
        return [value[base + ends[i] : base + ends[i + 1]] for i in indexes]

    def deliver_column(self) -> array:
        return column("q", self.value[self._deliver : self._topic_idx])

    def randoms(self) -> bytes:
        return self.value[self._randoms : self._deliver]

    def topic_indexes(self) -> bytes:
        return self.value[self._topic_idx : self._ends]

    def message_ids(self, seq: int) -> list[bytes]:
        """Every message's id (ASCII), by index, were this segment `seq`: what a fetch
        hands out, and what an Ack of many compares its ids with (as `owns` checks one)."""
        return segment_ids(self.deliver_column(), seq, self.randoms())

    def owns(self, parsed: ServerId) -> bool:
        """Whether a parsed id names a message of this segment (its index, deliver time and
        random part): a forged or stale id finds nothing."""
        index = parsed.message_index
        return (
            index < self.n
            and self.random(index) == parsed.random
            and self.deliver_ms(index) == parsed.deliver_ms
        )

    def extras(self, index: int) -> Extras | None:
        """The message's sparse entry, if it has one (the sparse part parsed once)."""
        if self._extras is None:
            self._extras = _decode_sparse(self.value, self._sparse_at + 4, self._bodies)
        return self._extras.get(index)

    def when(self, index: int) -> When:
        found = self.extras(index)
        if found is not None and found.when is not None:
            return found.when
        deliver = self.deliver_ms(index)
        if self.when_kind == WhenKind.DELAY:
            return When(WhenKind.DELAY, deliver - self.created_ms)
        return When(self.when_kind, deliver)


def _decode_sparse(value: bytes, at: int, end: int) -> dict[int, Extras]:
    out: dict[int, Extras] = {}
    while at < end:
        index, which, flags = _SPARSE_HEAD.unpack_from(value, at)
        at += _SPARSE_HEAD.size
        when = client_id = None
        properties: dict[str, str] = {}
        if which & _HAS_WHEN:
            kind, when_value = _WHEN.unpack_from(value, at)
            when, at = When(WhenKind(kind), when_value), at + _WHEN.size
        if which & _HAS_ID:
            client_id, at = _read_str16(value, at)
        if which & _HAS_PROPERTIES:
            (count,) = _U16.unpack_from(value, at)
            at += 2
            for _ in range(count):
                key, at = _read_str16(value, at)
                (length,) = _U32.unpack_from(value, at)
                properties[key] = value[at + 4 : at + 4 + length].decode()
                at += 4 + length
        out[index] = Extras(flags, when, client_id, properties)
    return out


def _read_str16(value: bytes, at: int) -> tuple[str, int]:
    (length,) = _U16.unpack_from(value, at)
    return value[at + 2 : at + 2 + length].decode(), at + 2 + length


def decode_segment(value: bytes) -> Segment:
    """A whole segment (export, upgrade checks, tests); the hot readers use `SegmentView`."""
    view = SegmentView(value)
    view.extras(0)
    return Segment(
        view.created_ms,
        view.when_kind,
        view.topics,
        view.topic_indexes(),
        view.deliver_column().tolist(),
        view.randoms(),
        view.bodies(range(view.n)),
        dict(view._extras or {}),
    )
