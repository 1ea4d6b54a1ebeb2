"""Key layout of the batch-level store, schema version 2 (planned; decision 0014).

Opened only by ``timerwheel.store.batch_store``, which a test or a bench calls by name: the
server writes version 1 (``timerwheel.store.keys``) until the engine runs version 2 and
the upgrade lands; the writers of the send, the fire, the Ack, the sweep and the overrides
are in store/ (``timerwheel.store.segment_*``). As in version 1, integers in keys are
fixed-width big-endian unsigned, so byte order is numeric order and a time range is a key
range. Values: ``timerwheel.store.segments`` (segments),
``timerwheel.store.batch_entries`` (the rest).

================  ================================================  =======================
column family     key (version 2, planned)                          value
================  ================================================  =======================
``segments``      segment seq (8 B)                                 the segment's columns
``wheel_hour``    slot start ms (8 B) + segment seq (8 B)           the segment's (deliver
``wheel_minute``  same                                              ms, index) pairs due in
``wheel_second``  same                                              that slot, sorted
``ready``         topic + 0x00 + fire chunk seq (8 B), as v1's      fire ms + references
``acked``         Ack call seq (8 B)                                acked-at ms + references
``segstate``      segment seq (8 B)                                 states and their times
``expiry``        expire ms (8 B) + segment seq (8 B)               empty
``overrides``     segment seq (8 B) + index (2 B)                   what changed
``ids``           client id (UTF-8, ``<scope>/<id>``)               segment seq + index
``trace``         segment seq (8 B) + index (2 B) + trace seq (8)   one event, as v1's
``meta``          name (ASCII), v1's and ``META_*`` below           cursor, seqs
``counts``        as v1's                                           as v1's
``extras``        segment seq (8 B) + index (2 B)                   as v1's (JSON)
``series``        a v1 series' id; id + 0x00 + ``extras`` or        its v1 record, extras,
                  ``trace`` + seq (the upgrade's, step 5)           trace events
================  ================================================  =======================

A segment's overrides, trace events and extras are each one key range (the segment's
key is their prefix), so the sweep deletes a segment's with one range delete. A wheel
slot is the range [slot_bound(start), slot_bound(end)).
"""

from __future__ import annotations

import struct

from timerwheel.store.keys import (
    CF_COUNTS,
    CF_EXPIRY,
    CF_EXTRAS,
    CF_META,
    CF_READY,
    CF_TRACE,
    CF_WHEEL,
    ready_key,
    ready_seq,
)
from timerwheel.store.segment_ids import MAX_SEGMENT

PLANNED_SCHEMA_VERSION = 2
CF_SEGMENTS = "segments"
CF_ACKED = "acked"
CF_SEGSTATE = "segstate"
CF_OVERRIDES = "overrides"
CF_IDS = "ids"
# A version-1 series, as the upgrade found it (`timerwheel.store.segment_upgrade`).
CF_SERIES = "series"
PLANNED_COLUMN_FAMILIES = (
    CF_SEGMENTS,
    *CF_WHEEL.values(),
    CF_READY,
    CF_ACKED,
    CF_SEGSTATE,
    CF_EXPIRY,
    CF_OVERRIDES,
    CF_IDS,
    CF_TRACE,
    CF_META,
    CF_COUNTS,
    CF_EXTRAS,
    CF_SERIES,
)

META_FIRE_CURSOR = b"fire.cursor"  # batch_entries.cursor_value
META_SEGMENT_SEQ = b"segment.seq"  # the last segment's seq
META_CHUNK_SEQ = b"fire.chunk_seq"  # the last fire chunk's seq

_SEQ = struct.Struct(">Q")
_PAIR = struct.Struct(">QQ")
_PLACE = struct.Struct(">QH")
_TRACE = struct.Struct(">QHQ")
SEQ_BYTES = _SEQ.size
# Unchanged from version 1: a topic's fire chunks, in fire order.
chunk_key, chunk_seq = ready_key, ready_seq


def segment_key(seq: int) -> bytes:
    """A `segments` or `segstate` key; also the prefix of the segment's overrides,
    extras and trace keys."""
    return _SEQ.pack(seq)


def segment_seq(key: bytes) -> int:
    return _SEQ.unpack_from(key)[0]


def segment_range(seq: int) -> tuple[bytes, bytes]:
    """[first, end) of every `overrides`, `extras` or `trace` key of segment `seq`."""
    if not 0 <= seq <= MAX_SEGMENT:
        raise ValueError(f"segment seq {seq} outside the id's 40 bits")
    return _SEQ.pack(seq), _SEQ.pack(seq + 1)


def slot_bound(t_ms: int) -> bytes:
    """The smallest wheel or expiry key at time `t_ms`: a range-scan bound."""
    return _SEQ.pack(t_ms)


def wheel_entry_key(slot_start_ms: int, seq: int) -> bytes:
    """The wheel key of segment `seq`'s messages due in the slot starting then."""
    return _PAIR.pack(slot_start_ms, seq)


def decode_wheel_entry_key(key: bytes) -> tuple[int, int]:
    """(slot start ms, segment seq) of a wheel entry's key."""
    start, seq = _PAIR.unpack(key)
    return start, seq


def acked_key(ack_seq: int) -> bytes:
    return _SEQ.pack(ack_seq)


def expiry_key(expire_ms: int, seq: int) -> bytes:
    """Segment `seq` is swept at `expire_ms` (retention after its last terminal state)."""
    return _PAIR.pack(expire_ms, seq)


def decode_expiry_key(key: bytes) -> tuple[int, int]:
    expire_ms, seq = _PAIR.unpack(key)
    return expire_ms, seq


def place_key(seq: int, index: int) -> bytes:
    """An `overrides` or `extras` key: one message of one segment."""
    return _PLACE.pack(seq, index)


def decode_place_key(key: bytes) -> tuple[int, int]:
    seq, index = _PLACE.unpack(key)
    return seq, index


def ids_key(client_id: str) -> bytes:
    """The `ids` key of a client-chosen id (already scoped, decision 0012)."""
    if not client_id:
        raise ValueError("an empty client id has no `ids` key")
    return client_id.encode()


def trace_key(seq: int, index: int, trace_seq: int) -> bytes:
    return _TRACE.pack(seq, index, trace_seq)


def decode_trace_key(key: bytes) -> tuple[int, int, int]:
    seq, index, trace_seq = _TRACE.unpack(key)
    return seq, index, trace_seq
