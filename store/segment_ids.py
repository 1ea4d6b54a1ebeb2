"""Server-made message ids of the batch-level layout (decision 0014; version 2, planned).

An id names where its message is, so an Ack or a Get needs no per-message index entry,
and keeps 80 random bits, so it stays as unguessable as decision 0005's:

==========  =========  ====================================================================
hex digits  bits       what
==========  =========  ====================================================================
0-11        48         the deliver time the send gave it (ms): ids sort by it, as today's
12-21       40         the segment seq (``timerwheel.store.segments``)
22-25       16         the message's index in that segment
26-45       80         random: checked against the segment's ids column
                       (`timerwheel.store.segments.SegmentView.owns`)
==========  =========  ====================================================================

46 lowercase hex digits; any other spelling is refused, so one message has one id.
The deliver time in the id is the one the send gave it: a Reschedule changes when the
message fires (an ``overrides`` entry), never its id.
"""

from __future__ import annotations

import binascii
import re
import struct
import sys
from array import array
from collections.abc import Sequence
from typing import NamedTuple

ID_HEX_DIGITS = 46
RANDOM_BYTES = 10  # 80 bits: a segment's ids column holds this much a message
MAX_DELIVER_MS = (1 << 48) - 1
MAX_SEGMENT = (1 << 40) - 1
MAX_INDEX = (1 << 16) - 1
_SHAPE = re.compile(rb"[0-9a-f]{46}")
_INDEXES = struct.pack(f">{MAX_INDEX + 1}H", *range(MAX_INDEX + 1))  # every index, BE
_ID_BYTES = ID_HEX_DIGITS // 2  # 6 time, 5 segment, 2 index, 10 random
_LITTLE = sys.byteorder == "little"


class ServerId(NamedTuple):
    """A parsed server-made id: where the message is, and the random part to check."""

    deliver_ms: int
    segment: int
    message_index: int  # in the segment (`index` would hide tuple.index)
    random: bytes  # RANDOM_BYTES


def format_id(deliver_ms: int, segment: int, index: int, random: bytes) -> str:
    """The id of the message at (`segment`, `index`), given to it at the send."""
    _check_fields(deliver_ms, segment, index, random)
    return f"{deliver_ms:012x}{segment:010x}{index:04x}{random.hex()}"


def segment_ids(deliver_ms: Sequence[int], segment: int, randoms: bytes) -> list[bytes]:
    """The ids (ASCII) of a segment's messages, index by index: its deliver column, its
    seq and its ids column (`RANDOM_BYTES` a message) in, an id a message out."""
    if not 0 <= segment <= MAX_SEGMENT:
        raise ValueError(f"segment {segment} does not fit the id's 40 bits")
    if len(randoms) != RANDOM_BYTES * len(deliver_ms) or len(deliver_ms) > MAX_INDEX + 1:
        raise ValueError(
            f"{len(deliver_ms)} messages and {len(randoms)} random bytes do not make "
            f"a segment's ids (at most {MAX_INDEX + 1}, {RANDOM_BYTES} bytes each)"
        )
    if deliver_ms and not 0 <= min(deliver_ms) <= max(deliver_ms) <= MAX_DELIVER_MS:
        raise ValueError(f"a deliver time of {deliver_ms!r:.80} does not fit the id's 48 bits")
    # An id is the hex of its 23 big-endian bytes, so the segment's ids are one hexlify
    # of a table of n such rows, filled a byte position at a time by strided slices (C
    # loops): no format a message, only the final slicing.
    n = len(deliver_ms)
    rows = bytearray(_ID_BYTES * n)
    deliver = struct.pack(f">{n}q", *deliver_ms)
    for k in range(6):  # the low 48 bits of each u64
        rows[k::_ID_BYTES] = deliver[2 + k :: 8]
    for k, byte in enumerate(segment.to_bytes(5, "big")):
        rows[6 + k :: _ID_BYTES] = bytes((byte,)) * n
    rows[11::_ID_BYTES], rows[12::_ID_BYTES] = _INDEXES[0 : 2 * n : 2], _INDEXES[1 : 2 * n : 2]
    for k in range(RANDOM_BYTES):
        rows[13 + k :: _ID_BYTES] = randoms[k::RANDOM_BYTES]
    hexed = binascii.hexlify(rows)
    return [hexed[at : at + ID_HEX_DIGITS] for at in range(0, len(hexed), ID_HEX_DIGITS)]


def parse_id(message_id: str | bytes) -> ServerId:
    """The parts of a server-made id; ValueError naming the value when it is not one."""
    raw = message_id.encode() if isinstance(message_id, str) else message_id
    if len(raw) != ID_HEX_DIGITS or _SHAPE.fullmatch(raw) is None:
        raise ValueError(
            f"{message_id!r:.80} is not a server-made id "
            f"({ID_HEX_DIGITS} lowercase hex digits: time, segment, index, random part)"
        )
    return ServerId(
        int(raw[:12], 16),
        int(raw[12:22], 16),
        int(raw[22:26], 16),
        bytes.fromhex(raw[26:].decode()),
    )


def parse_ids(message_ids: list[bytes]) -> list[ServerId]:
    """`parse_id` of many ids (ASCII)."""
    return [parse_id(raw) for raw in message_ids]


def id_places(message_ids: list[bytes]) -> tuple[array, array]:
    """The segment ("Q") and index ("H") columns of many ids (ASCII), checked as
    `parse_id` checks each, in bulk and column-wise (`segment_ids` in reverse): the Ack's
    path, which then compares each id with its segment's, random part and time included.
    ValueError naming the first that is not an id."""
    joined = b"".join(message_ids)
    # unhexlify refuses what is not hex, and lower() shows an upper-case digit: C loops
    # over the lot, a few instructions a byte where a regular expression takes about 40.
    try:
        if set(map(len, message_ids)) - {ID_HEX_DIGITS} or joined.lower() != joined:
            raise ValueError("not all server-made ids")
        rows = binascii.unhexlify(joined)
    except ValueError:  # binascii.Error is one
        for raw in message_ids:
            parse_id(raw)  # raises, naming it
        raise
    n = len(message_ids)
    segments, indexes = bytearray(8 * n), bytearray(2 * n)
    for k in range(5):
        segments[3 + k :: 8] = rows[6 + k :: _ID_BYTES]
    indexes[0::2], indexes[1::2] = rows[11::_ID_BYTES], rows[12::_ID_BYTES]
    return _from_big_endian("Q", segments), _from_big_endian("H", indexes)


def _from_big_endian(typecode: str, raw: bytearray) -> array:
    values = array(typecode, raw)
    if _LITTLE:
        values.byteswap()
    return values


def _check_fields(deliver_ms: int, segment: int, index: int, random: bytes) -> None:
    if not 0 <= deliver_ms <= MAX_DELIVER_MS:
        raise ValueError(f"deliver time {deliver_ms} does not fit the id's 48 bits")
    if not 0 <= segment <= MAX_SEGMENT:
        raise ValueError(f"segment {segment} does not fit the id's 40 bits")
    if not 0 <= index <= MAX_INDEX:
        raise ValueError(f"index {index} does not fit the id's 16 bits")
    if len(random) != RANDOM_BYTES:
        raise ValueError(f"random part {random!r} is not {RANDOM_BYTES} bytes")
