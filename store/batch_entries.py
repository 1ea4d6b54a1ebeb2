"""Values of the batch-level layout's per-batch families (decision 0014; version 2, planned).

Each entry stands for many messages, named as (segment seq, index); the keys are in
``timerwheel.store.batch_keys``, the segments in ``timerwheel.store.segments``. Integers
are little-endian columns (`array`), as a segment's.

===============  ==========================================  ================================
family           value                                       written
===============  ==========================================  ================================
``wheel_*``      n x i64 deliver ms, then n x u16 index:     one a (slot, segment) at the
                 the segment's messages due in the slot,     send; deleted once the fire
                 sorted by (deliver ms, index)               cursor passes it
``ready``        i64 fire ms, u32 n, n x u64 segment seq,    one a (fire chunk, topic); gone
                 n x u16 index: in fire order                with the chunk's last ack
``acked``        i64 acked-at ms, u32 n, n x u64 segment,    one an Ack call; gone once every
                 n x u16 index                               segment it names is terminal
``segstate``     n x u8 state, then n x i64 its time         one a segment, when its last
                 (ACKED at, CANCELLED at)                    message turns terminal
``overrides``    u8 which fields, then those of: i64         a rare operation, one a message
                 deliver ms, i64 cancelled-at ms, u16 +      it touches (Reschedule, Nack's
                 topic (UTF-8)                               delay, Cancel, a REPLACE's old
                                                             copy, a dead-letter move)
``ids``          segment seq (8 B BE) + index (2 B BE)       a client-chosen id's place
``meta`` cursor  deliver ms, segment, index (8 + 8 + 2 B     each fire commit: (deliver ms,
                 BE: bytes compare as the cursor does)       segment, index) fired through
``expiry``       empty (the key says it all)                 one a segment, with `segstate`
===============  ==========================================  ================================
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Sequence
from typing import NamedTuple

from timerwheel.store.segment_ids import MAX_INDEX
from timerwheel.store.segments import column, column_bytes

_REFS_HEAD = struct.Struct("<qI")
_BE_PLACE = struct.Struct(">QH")
_CURSOR = struct.Struct(">QQH")
_OVERRIDE_WHICH = struct.Struct("<B")
_I64 = struct.Struct("<q")
_U16 = struct.Struct("<H")
_HAS_DELIVER, _HAS_CANCELLED, _HAS_TOPIC = 1, 2, 4
_INDEXES = column_bytes("H", range(MAX_INDEX + 1))  # every index, as a wheel entry holds it


def wheel_entry(times_ms: Sequence[int], indexes: Sequence[int]) -> bytes:
    """A (slot, segment) wheel entry from its pairs, already sorted (`wheel_entries`)."""
    if len(times_ms) != len(indexes) or not times_ms:
        raise ValueError(f"{len(times_ms)} deliver times and {len(indexes)} indexes")
    return column_bytes("q", times_ms) + column_bytes("H", indexes)


def wheel_entry_run(times_column: bytes, first: int, end: int) -> bytes:
    """The wheel entry of the run [first, end) of a segment whose index order is its
    deliver order (the send's): the pairs are that slice of its deliver column (packed
    once, as `column_bytes("q", ...)`) and the indexes first..end-1, so nothing is
    packed again a message."""
    if not 0 <= first < end <= min(len(times_column) // 8, len(_INDEXES) // 2):
        raise ValueError(f"run [{first}, {end}) of a column of {len(times_column) // 8}")
    return times_column[8 * first : 8 * end] + _INDEXES[2 * first : 2 * end]


def decode_wheel_entry(value: bytes) -> tuple[array, array]:
    """(deliver ms, index) columns of a wheel entry, sorted: `bisect` finds what is due."""
    n, rest = divmod(len(value), 10)
    if rest:
        raise ValueError(f"a wheel entry of {len(value)} bytes is not n x (8 + 2)")
    return column("q", value[: 8 * n]), column("H", value[8 * n :])


def wheel_entries(deliver_ms: Sequence[int], slot_ms: int) -> dict[int, bytes]:
    """A segment's wheel entries: {slot start ms: entry} for the slots of width `slot_ms`
    its messages (deliver ms by index) fall in, each entry's pairs sorted."""
    slots: dict[int, list[tuple[int, int]]] = {}
    for index, ms in enumerate(deliver_ms):
        slots.setdefault(ms - ms % slot_ms, []).append((ms, index))
    out = {}
    for start, pairs in slots.items():
        pairs.sort()
        out[start] = wheel_entry([p[0] for p in pairs], [p[1] for p in pairs])
    return out


class Refs(NamedTuple):
    """A `ready` or `acked` value: a time and (segment, index) references, in order."""

    time_ms: int
    segments: array  # "Q"
    indexes: array  # "H"


def refs_entry(time_ms: int, segments: Sequence[int], indexes: Sequence[int]) -> bytes:
    """A `ready` chunk (fire ms, references in fire order) or an `acked` entry (acked-at
    ms, the references the Ack call retired)."""
    if len(segments) != len(indexes):
        raise ValueError(f"{len(segments)} segments and {len(indexes)} indexes")
    return (
        _REFS_HEAD.pack(time_ms, len(segments))
        + column_bytes("Q", segments)
        + column_bytes("H", indexes)
    )


def decode_refs(value: bytes) -> Refs:
    at = _REFS_HEAD.size
    time_ms, n = _REFS_HEAD.unpack_from(value) if len(value) >= at else (0, -1)
    if len(value) != at + 10 * n:
        raise ValueError(f"a references entry of {len(value)} bytes does not hold {n}")
    return Refs(time_ms, column("Q", value[at : at + 8 * n]), column("H", value[at + 8 * n :]))


def refs_time_ms(value: bytes) -> int:
    """A `ready` chunk's fire time or an `acked` entry's ack time, nothing else decoded."""
    return _I64.unpack_from(value)[0]


def segstate_entry(states: bytes, times_ms: Sequence[int]) -> bytes:
    """A terminal segment's states (one byte a message, `State`) and their times."""
    if len(states) != len(times_ms):
        raise ValueError(f"{len(states)} states and {len(times_ms)} times")
    return bytes(states) + column_bytes("q", times_ms)


def decode_segstate(value: bytes) -> tuple[bytes, array]:
    n, rest = divmod(len(value), 9)
    if rest:
        raise ValueError(f"a segstate entry of {len(value)} bytes is not n x (1 + 8)")
    return value[:n], column("q", value[n:])


def segstate_of(value: bytes, index: int) -> tuple[int, int]:
    """One message's (state, time) from its segment's `segstate`, nothing else decoded."""
    n = len(value) // 9
    if not 0 <= index < n:
        raise IndexError(f"index {index} of a segstate of {n}")
    return value[index], _I64.unpack_from(value, n + 8 * index)[0]


class Override(NamedTuple):
    """What a rare operation changed of one message (None: unchanged)."""

    deliver_ms: int | None = None  # Reschedule, Nack's delay
    cancelled_at_ms: int | None = None  # Cancel, REPLACE's old copy, a dead-letter move
    topic: str | None = None


def override_value(override: Override) -> bytes:
    deliver_ms, cancelled_at_ms, topic = override
    which = (
        (_HAS_DELIVER if deliver_ms is not None else 0)
        | (_HAS_CANCELLED if cancelled_at_ms is not None else 0)
        | (_HAS_TOPIC if topic is not None else 0)
    )
    if not which:
        raise ValueError("an override that changes nothing")
    parts = [_OVERRIDE_WHICH.pack(which)]
    if deliver_ms is not None:
        parts.append(_I64.pack(deliver_ms))
    if cancelled_at_ms is not None:
        parts.append(_I64.pack(cancelled_at_ms))
    if topic is not None:
        raw = topic.encode()
        parts += [_U16.pack(len(raw)), raw]
    return b"".join(parts)


def decode_override(value: bytes) -> Override:
    try:
        return _decode_override(value)
    except struct.error as exc:
        raise ValueError(f"an override of {len(value)} bytes is cut short: {exc}") from exc


def _decode_override(value: bytes) -> Override:
    (which,) = _OVERRIDE_WHICH.unpack_from(value)
    at, deliver_ms, cancelled_at_ms, topic = 1, None, None, None
    if which & _HAS_DELIVER:
        (deliver_ms,) = _I64.unpack_from(value, at)
        at += 8
    if which & _HAS_CANCELLED:
        (cancelled_at_ms,) = _I64.unpack_from(value, at)
        at += 8
    if which & _HAS_TOPIC:
        (length,) = _U16.unpack_from(value, at)
        topic = value[at + 2 : at + 2 + length].decode()
        at += 2 + length
    if at != len(value) or not which:
        raise ValueError(f"an override of {len(value)} bytes, {at} expected (fields {which})")
    return Override(deliver_ms, cancelled_at_ms, topic)


def place_value(segment: int, index: int) -> bytes:
    """An `ids` value: where the message with that client id is."""
    return _BE_PLACE.pack(segment, index)


def decode_place(value: bytes) -> tuple[int, int]:
    _check_size(value, _BE_PLACE, "an `ids` value")
    segment, index = _BE_PLACE.unpack(value)
    return segment, index


def cursor_value(deliver_ms: int, segment: int, index: int) -> bytes:
    """The fire cursor in `meta`: (deliver ms, segment, index) fired through."""
    return _CURSOR.pack(deliver_ms, segment, index)


def decode_cursor(value: bytes) -> tuple[int, int, int]:
    _check_size(value, _CURSOR, "a fire cursor")
    deliver_ms, segment, index = _CURSOR.unpack(value)
    return deliver_ms, segment, index


def _check_size(value: bytes, shape: struct.Struct, what: str) -> None:
    if len(value) != shape.size:
        raise ValueError(f"{what} of {len(value)} bytes, not {shape.size}: {value!r:.40}")
