"""The `messages` record: a fixed header followed by topic, properties and body.

    header (struct ">BBBqqqqqqq", 60 bytes)
        version, state, when_kind, when_value, deliver_at_ms, created_at_ms,
        fired_at_ms, acked_at_ms, cancelled_at_ms, ready_seq
    topic       u16 length + UTF-8
    properties  u16 count, then per entry: u16 key length + key, u32 value length + value
    body        the rest, but for a first-delivery trailer (version 2 only)
    trailer     (version 2: an acked record) the subscriber's name (UTF-8), then
                struct ">qH" (10 bytes): delivered_at_ms, the name's length

Version 2 is version 1 with the trailer: an Ack writes the message's first delivery into
its record (when the delivery hub held that event for it: timerwheel.delivery.first_deliveries)
instead of a `trace` entry of its own, since it rewrites the record anyway. Version 1 records stay
as they are; every reader of a body stops where the trailer starts (`_body_end`).

State changes (fire, ack, cancel) rewrite only the header: the rest of the record is
copied as bytes, never decoded, which keeps the firing path cheap.

The when_kind byte holds flags above its low four bits: ``EXTRAS_FLAG`` says the message
has an entry in the ``extras`` column family (its send options, timerwheel.store.extras), so only
those few messages cost a read there; ``SERIES_FLAG`` marks a recurring series, which
the writer fires as an occurrence instead of firing the record itself; bits 4-5 say which
wheel the send placed it in (``timerwheel.store.keys.WHEEL_CODES``; 0: due at once, or a record
written before they were), the start of its trace (timerwheel.store.trace).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from functools import lru_cache
from itertools import repeat
from operator import itemgetter

from timerwheel.common import State
from timerwheel.store.fired_record import FiredRecord, fired_records  # noqa: F401 (re-exported)
from timerwheel.store.keys import WHEEL_CODES, WHEEL_NAMES
from timerwheel.store.record_fields import U16 as _U16
from timerwheel.store.record_fields import (
    decode_properties,
    decode_str16,
    encode_properties,
    encode_str16,
    skip_properties,
    state_of,
    when_kind_of,
)
from timerwheel.wheels.domain import FiredTimer, Timer, When
from timerwheel.wheels.trace import RecordFacts

RECORD_VERSION = 1
RECORD_WITH_DELIVERY = 2  # version 1 + the first-delivery trailer (the newest version)
_HEADER = struct.Struct(">BBBqqqqqqq")
_TRAILER_TAIL = struct.Struct(">qH")  # delivered_at_ms, the subscriber's length
HEADER_BYTES = _HEADER.size
_I64 = struct.Struct(">q")
_DELIVER_AT_OFFSET = 3 + 8 * 1  # after version, state, when_kind, when_value
_FIRED_AT_OFFSET = 3 + 8 * 3  # after version, state, when_kind, when_value, deliver, created
_DELIVER_AND_FIRED_AT = struct.Struct(">q8xq")  # from _DELIVER_AT_OFFSET: created_at skipped
_FIRST = itemgetter(0)
_ACKED_AT_OFFSET = 3 + 8 * 4
_READY_SEQ_OFFSET = 3 + 8 * 6
_VERSIONS = (RECORD_VERSION, RECORD_WITH_DELIVERY)
_SCHEDULED, _FIRED, _ACKED = int(State.SCHEDULED), int(State.FIRED), int(State.ACKED)
# A new record's header in three parts: constant, the four fields a send sets, zeros.
_NEW_HEAD = bytes([RECORD_VERSION, _SCHEDULED])
_NEW_FIELDS = struct.Struct(">Bqqq")  # when_kind, when_value, deliver_at_ms, created_at_ms
_NEW_TAIL = bytes(_HEADER.size - len(_NEW_HEAD) - _NEW_FIELDS.size)
_WHEN_KIND_OFFSET = 2
EXTRAS_FLAG = 0x80  # in the when_kind byte: the message has an `extras` entry
SERIES_FLAG = 0x40  # ... and it is a recurring series (its extras say how it repeats)
_PLACEMENT_SHIFT = 4
_PLACEMENT_MASK = 0x30
_KIND_MASK = 0x0F
_STATE_BYTE, _WHEN_KIND_BYTE = itemgetter(1), itemgetter(_WHEN_KIND_OFFSET)
_NOT_SERIES_KINDS = bytes(kind for kind in range(256) if not kind & SERIES_FLAG)  # to delete


def encode_timer(timer: Timer) -> bytes:
    parts = [
        _HEADER.pack(
            RECORD_VERSION, timer.state, timer.when.kind, timer.when.value,
            timer.deliver_at_ms, timer.created_at_ms, timer.fired_at_ms,
            timer.acked_at_ms, timer.cancelled_at_ms, timer.ready_seq,
        ),
        encode_str16(timer.topic),
        encode_properties(timer.properties),
        timer.body,
    ]  # fmt: skip
    return b"".join(parts)


def encode_new_many(specs: list, deliver_times_ms: list[int], created_at_ms: int) -> list[bytes]:
    """The records of new SCHEDULED timers, one per `SendSpec`: the hot path of every send.

    A new record's header is constant but for four fields (the fired/acked/cancelled
    times and the ready seq are zero), so only those are packed, between constant bytes.
    """
    head, tail, pack, bare = _NEW_HEAD, _NEW_TAIL, _NEW_FIELDS.pack, _topic_block_bare
    encoded = []
    for spec, deliver_at_ms in zip(specs, deliver_times_ms, strict=True):
        when = spec.when
        if spec.properties:
            middle = topic_block(spec.topic) + encode_properties(spec.properties)
        else:
            middle = bare(spec.topic)
        fields = pack(when.kind, when.value, deliver_at_ms, created_at_ms)
        encoded.append(head + fields + tail + middle + spec.body)
    return encoded


@lru_cache(maxsize=4096)
def topic_block(topic: str) -> bytes:
    """The topic as a record holds it right after its header (length, then UTF-8)."""
    return encode_str16(topic)


@lru_cache(maxsize=4096)
def _topic_block_bare(topic: str) -> bytes:
    """Topic plus an empty property list: what most sends carry."""
    return encode_str16(topic) + _U16.pack(0)


def decode_timer(message_id: str, raw: bytes) -> Timer:
    (version, state, when_kind, when_value, deliver_at_ms, created_at_ms, fired_at_ms,
     acked_at_ms, cancelled_at_ms, seq) = _HEADER.unpack_from(raw)  # fmt: skip
    if version not in _VERSIONS:
        raise ValueError(
            f"record of {message_id!r} has version {version}, expected one of {_VERSIONS}"
        )
    topic, offset = decode_str16(raw, HEADER_BYTES)
    properties, offset = decode_properties(raw, offset)
    return Timer(
        message_id=message_id, topic=topic, body=raw[offset : _body_end(raw)],
        properties=properties,
        deliver_at_ms=deliver_at_ms, created_at_ms=created_at_ms, state=state_of(state),
        when=When(when_kind_of(when_kind & _KIND_MASK), when_value), fired_at_ms=fired_at_ms,
        acked_at_ms=acked_at_ms, cancelled_at_ms=cancelled_at_ms, ready_seq=seq,
    )  # fmt: skip


def decode_fired(rows: list[tuple[int, bytes, bytes]]) -> list[FiredTimer]:
    """(fire seq, message id, record) rows, as read from `ready` or the fired cache, as
    whole `Timer`s."""
    return [FiredTimer(seq, decode_timer(mid.decode(), raw)) for seq, mid, raw in rows]


def delivery_parts(raw: bytes) -> tuple[bytes, bytes, dict[str, str], int, int]:
    """(topic as stored, body, properties, deliver_at_ms, fired_at_ms) of a fired record:
    what a Delivery carries besides its id and attempt, the hot path of every worker's
    stream. Two header fields read, not ten, and the topic left undecoded: a batch's
    records share it, so the caller decodes it once (`timerwheel.server.service.delivery_batch`).
    A Delivery built this way costs nearly a third less than one from a whole decoded record,
    built and serialised in batches (`python -m bench.rpc_bench`)."""
    deliver_at_ms, fired_at_ms = _DELIVER_AND_FIRED_AT.unpack_from(raw, _DELIVER_AT_OFFSET)
    (topic_bytes,) = _U16.unpack_from(raw, HEADER_BYTES)
    start = HEADER_BYTES + _U16.size
    offset = start + topic_bytes
    topic = raw[start:offset]
    end = _body_end(raw)
    if raw[offset : offset + 2] == b"\x00\x00":  # no properties: most messages
        return topic, raw[offset + 2 : end], {}, deliver_at_ms, fired_at_ms
    properties, offset = decode_properties(raw, offset)
    return topic, raw[offset:end], properties, deliver_at_ms, fired_at_ms


def record_body_bytes(raw: bytes) -> int:
    """The size of the record's body, without decoding the rest: what the delivery hub's
    byte budget counts."""
    (topic_bytes,) = _U16.unpack_from(raw, HEADER_BYTES)
    offset = HEADER_BYTES + _U16.size + topic_bytes
    if raw[offset : offset + 2] == b"\x00\x00":  # no properties: most messages
        return _body_end(raw) - offset - 2
    return _body_end(raw) - decode_properties(raw, offset)[1]


def record_state(raw: bytes) -> State:
    return state_of(raw[1])


def is_scheduled(raw: bytes) -> bool:
    """The firing path's check: a byte compare, no enum construction."""
    return raw[1] == _SCHEDULED


def all_plain_scheduled(raws: list[bytes | None]) -> bool:
    """Each record there, SCHEDULED and not a series: what a fire chunk most often is,
    decided over the state and when_kind bytes by C-implemented builtins (`map`,
    `bytes.count`, `bytes.translate`) with no Python step per record."""
    if None in raws:
        return False
    states = bytes(map(_STATE_BYTE, raws))
    if states.count(_SCHEDULED) != len(states):
        return False
    return not bytes(map(_WHEN_KIND_BYTE, raws)).translate(None, _NOT_SERIES_KINDS)


def has_extras(raw: bytes) -> bool:
    return bool(raw[_WHEN_KIND_OFFSET] & EXTRAS_FLAG)


def ids_with_extras(fired: list[FiredRecord]) -> list[str]:
    """The ids of the fired records that have send options (an `extras` entry): one
    test of a byte each, inline, since the delivery hub asks it of every fetched batch."""
    offset, flag = _WHEN_KIND_OFFSET, EXTRAS_FLAG
    return [row[1] for row in fired if row[2][offset] & flag]


def is_series(raw: bytes) -> bool:
    return bool(raw[_WHEN_KIND_OFFSET] & SERIES_FLAG)


def with_extras_flag(raw: bytes, series: bool = False) -> bytes:
    """A new record marked as having an `extras` entry (and as a series)."""
    patched = bytearray(raw)
    patched[_WHEN_KIND_OFFSET] |= EXTRAS_FLAG | (SERIES_FLAG if series else 0)
    return bytes(patched)


def with_placement(raw: bytes, wheel: str) -> bytes:
    """The record of a new send, marked with the wheel it is placed in ("": due at once)."""
    code = WHEEL_CODES[wheel] << _PLACEMENT_SHIFT
    kind = raw[_WHEN_KIND_OFFSET]
    if kind & _PLACEMENT_MASK == code:
        return raw
    return b"".join((raw[:_WHEN_KIND_OFFSET], bytes(((kind & ~_PLACEMENT_MASK) | code,)),
                     raw[_WHEN_KIND_OFFSET + 1 :]))  # fmt: skip


def record_placement(raw: bytes) -> str:
    """The wheel the send placed the timer in ("": due at once, or not recorded)."""
    return WHEEL_NAMES[(raw[_WHEN_KIND_OFFSET] & _PLACEMENT_MASK) >> _PLACEMENT_SHIFT]


def trace_facts(raw: bytes) -> RecordFacts:
    """What the record says about the timer's history (the base of its trace)."""
    header = _HEADER.unpack_from(raw)
    delivered_at_ms, delivered_to = first_delivery(raw) or (0, "")
    return RecordFacts(
        created_at_ms=header[5], placed_in=record_placement(raw), fired_at_ms=header[6],
        acked_at_ms=header[7], cancelled_at_ms=header[8],
        first_delivered_at_ms=delivered_at_ms, first_delivered_to=delivered_to,
    )  # fmt: skip


def first_delivery_trailer(delivered_at_ms: int, subscriber: str) -> bytes:
    """The trailer an Ack appends (`as_acked`): one for all messages of a delivery batch."""
    name = subscriber.encode()
    return name + _TRAILER_TAIL.pack(delivered_at_ms, len(name))


def first_delivery(raw: bytes) -> tuple[int, str] | None:
    """(delivered_at_ms, subscriber) of the first delivery an acked record holds, if any."""
    return read_first_delivery_trailer(raw) if raw[0] == RECORD_WITH_DELIVERY else None


def read_first_delivery_trailer(data: bytes) -> tuple[int, str]:
    """(delivered_at_ms, subscriber) of the trailer `data` ends with."""
    delivered_at_ms, length = _TRAILER_TAIL.unpack_from(data, len(data) - _TRAILER_TAIL.size)
    end = len(data) - _TRAILER_TAIL.size
    return delivered_at_ms, data[end - length : end].decode()


def _body_end(raw: bytes) -> int:
    """Where the body ends: the record's end, or its trailer's start (version 2)."""
    if raw[0] != RECORD_WITH_DELIVERY:
        return len(raw)
    (length,) = _U16.unpack_from(raw, len(raw) - _U16.size)
    return len(raw) - _TRAILER_TAIL.size - length


def with_deliver_at(raw: bytes, deliver_at_ms: int) -> bytes:
    """The record due at a new time, all else kept (a series moving to its next time)."""
    patched = bytearray(raw)
    _I64.pack_into(patched, _DELIVER_AT_OFFSET, deliver_at_ms)
    return bytes(patched)


def is_fired(raw: bytes) -> bool:
    return raw[1] == _FIRED


def fired_in(raw: bytes | None, topic_block: bytes) -> bool:
    """The record is there and FIRED on the topic a record holds as `topic_block`."""
    if raw is None or raw[1] != _FIRED:
        return False
    return raw[HEADER_BYTES : HEADER_BYTES + len(topic_block)] == topic_block


def all_fired_in(raws: list[bytes | None], topic_block: bytes) -> bool:
    """`fired_in` for each record, decided by C-implemented builtins (`map`, `itemgetter`,
    `bytes.count`, `all`) with no Python step per record (an Ack call's usual case: every
    record it names FIRED on its topic)."""
    if None in raws or bytes(map(_STATE_BYTE, raws)).count(_FIRED) != len(raws):
        return False
    topics = map(itemgetter(slice(HEADER_BYTES, HEADER_BYTES + len(topic_block))), raws)
    return all(map(topic_block.__eq__, topics))


def ready_seqs(raws: list[bytes]) -> list[int]:
    """`record_ready_seq` of each record, unpacked in C."""
    return list(map(_FIRST, map(_I64.unpack_from, raws, repeat(_READY_SEQ_OFFSET, len(raws)))))


def as_acked(raw: bytes, acked_at_ms: int, trailer: bytes = b"") -> bytes:
    """`with_transition(raw, ACKED, acked_at_ms=...)` for the hot ack path; with a
    `first_delivery_trailer`, the record carries its first delivery too (version 2)."""
    patched = bytearray(raw)
    patched[1] = _ACKED
    _I64.pack_into(patched, _ACKED_AT_OFFSET, acked_at_ms)
    if trailer and patched[0] == RECORD_VERSION:
        patched[0] = RECORD_WITH_DELIVERY
        patched += trailer
    return bytes(patched)


def as_fired(raw: bytes, fired_at_ms: int, ready_seq: int) -> bytes:
    """`with_transition(raw, FIRED, ...)` for the hot firing path: patches three fields."""
    patched = bytearray(raw)
    patched[1] = _FIRED
    _I64.pack_into(patched, _FIRED_AT_OFFSET, fired_at_ms)
    _I64.pack_into(patched, _READY_SEQ_OFFSET, ready_seq)
    return bytes(patched)


def with_schedule(raw: bytes, when: When, deliver_at_ms: int) -> bytes:
    """The record moved to a new time (Reschedule): `when` and `deliver_at_ms` replaced."""
    fields = list(_HEADER.unpack_from(raw))
    fields[2:5] = [when.kind | (fields[2] & ~_KIND_MASK), when.value, deliver_at_ms]
    return _HEADER.pack(*fields) + raw[HEADER_BYTES:]


def fire_lateness_ms(raws: list[bytes]) -> Iterator[int]:
    """fired_at_ms - deliver_at_ms of each record of one commit's fires, which share one
    fired_at_ms (the commit's): read once, each deliver time unpacked in C, no Python
    frame per record (a fire chunk is 10,000; a call per record was a visible share of the
    engine's CPU in a burst). The offset is passed positionally, beside each record: a
    `partial` with `offset=` built the call's keywords for every record, nearly half the
    cost a record."""
    fired_at_ms = record_fired_at_ms(raws[0]) if raws else 0
    deliver_at = map(_I64.unpack_from, raws, repeat(_DELIVER_AT_OFFSET, len(raws)))
    return map(fired_at_ms.__sub__, map(_FIRST, deliver_at))


def record_fired_at_ms(raw: bytes) -> int:
    return _I64.unpack_from(raw, _FIRED_AT_OFFSET)[0]


def record_deliver_at_ms(raw: bytes) -> int:
    return _I64.unpack_from(raw, _DELIVER_AT_OFFSET)[0]


# ``raw[DELIVER_AT_TIME_BOUND]`` is ``keys.time_bound(deliver_at_ms)`` of the record,
# cut out of its bytes undecoded: the header stores deliver_at_ms as 8 bytes big-endian,
# and a deliver time is never negative, so those bytes are exactly the time part of
# the record's wheel key, and they compare as the times do. The export's messages loop
# uses it on every record instead of a decode and a pack.
DELIVER_AT_TIME_BOUND = slice(_DELIVER_AT_OFFSET, _DELIVER_AT_OFFSET + 8)


def record_topic(raw: bytes) -> str:
    return decode_str16(raw, HEADER_BYTES)[0]


def record_ready_seq(raw: bytes) -> int:
    """The one field, not the header's ten (a value each): less than half the cost, and it
    runs once an acked message."""
    return _I64.unpack_from(raw, _READY_SEQ_OFFSET)[0]


def record_summary(raw: bytes) -> tuple[int, int, int, str, int]:
    """(state, deliver_at_ms, created_at_ms, topic, body length) without decoding the rest.

    For bulk readers (the capacity report decodes millions of records): the properties
    are skipped by their lengths, never decoded, and the body is never copied.
    """
    header = _HEADER.unpack_from(raw)
    topic, offset = decode_str16(raw, HEADER_BYTES)
    offset = skip_properties(raw, offset)
    return header[1], header[4], header[5], topic, _body_end(raw) - offset


def with_transition(
    raw: bytes,
    state: State,
    *,
    fired_at_ms: int | None = None,
    acked_at_ms: int | None = None,
    cancelled_at_ms: int | None = None,
    ready_seq: int | None = None,
) -> bytes:
    """The record with a new state and timestamps; everything after the header is reused."""
    fields = list(_HEADER.unpack_from(raw))
    fields[1] = state
    for index, value in ((6, fired_at_ms), (7, acked_at_ms), (8, cancelled_at_ms), (9, ready_seq)):
        if value is not None:
            fields[index] = value
    return _HEADER.pack(*fields) + raw[HEADER_BYTES:]
