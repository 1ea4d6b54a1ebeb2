"""The codecs of a record's value fields: length-prefixed strings (the topic, property
keys), the property list, and the state and when-kind bytes as enums.

Their own module because they are generic field encodings that know nothing of where a
field sits: timerwheel.store.records owns the record's layout (its header table) and
composes these at its offsets.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from timerwheel.common import State
from timerwheel.wheels.domain import WhenKind

U16 = struct.Struct(">H")  # a string's length, a property count
U32 = struct.Struct(">I")  # a property value's length


def encode_str16(text: str) -> bytes:
    data = text.encode()
    return U16.pack(len(data)) + data


def decode_str16(raw: bytes, offset: int) -> tuple[str, int]:
    (length,) = U16.unpack_from(raw, offset)
    start = offset + U16.size
    return raw[start : start + length].decode(), start + length


def encode_properties(properties: Mapping[str, str]) -> bytes:
    parts = [U16.pack(len(properties))]
    for key, value in properties.items():
        value_bytes = value.encode()
        parts += [encode_str16(key), U32.pack(len(value_bytes)), value_bytes]
    return b"".join(parts)


def decode_properties(raw: bytes, offset: int) -> tuple[dict[str, str], int]:
    (count,) = U16.unpack_from(raw, offset)
    offset += U16.size
    properties = {}
    for _ in range(count):
        key, offset = decode_str16(raw, offset)
        (length,) = U32.unpack_from(raw, offset)
        offset += U32.size
        properties[key] = raw[offset : offset + length].decode()
        offset += length
    return properties, offset


def skip_properties(raw: bytes, offset: int) -> int:
    """Where the property list at `offset` ends, skipped by its lengths, never decoded."""
    (count,) = U16.unpack_from(raw, offset)
    offset += U16.size
    for _ in range(count):
        (key_length,) = U16.unpack_from(raw, offset)
        offset += U16.size + key_length
        (value_length,) = U32.unpack_from(raw, offset)
        offset += U32.size + value_length
    return offset


# Enum construction by value (`State(2)`) runs Python code in the enum's metaclass, many
# times a dict lookup; every delivered message decodes two, so known values are looked up
# instead. Unknown ones still raise ValueError.
_STATES = {int(state): state for state in State}
_WHEN_KINDS = {int(kind): kind for kind in WhenKind}


def state_of(value: int) -> State:
    found = _STATES.get(value)
    return found if found is not None else State(value)


def when_kind_of(value: int) -> WhenKind:
    found = _WHEN_KINDS.get(value)
    return found if found is not None else WhenKind(value)
