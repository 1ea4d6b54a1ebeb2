"""Decoding exported ``messages`` records into report rows (an Arrow table per file).

The record codec is timerwheel.store.records (`record_summary` reads just the fields the report
needs, and `record_fired_at_ms` the fire time). The per-row Python work is kept to those
calls and a few appends; everything
that can be done per column is done by Arrow in C++: the UTF-8 check of the ids, the
state names, and finding which wheel holds each scheduled timer (one hash lookup of
all the file's wheel keys in its slice's wheel keys).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from timerwheel.common import State
from timerwheel.store import keys, records


def _state_names() -> pa.Array:
    """State name by state value (record byte -> 'SCHEDULED', ...)."""
    names: list[str | None] = [None] * (max(State) + 1)
    for state in State:
        names[state] = state.name
    return pa.array(names, pa.string())


_STATE_NAMES = _state_names()
_SCHEDULED = int(State.SCHEDULED)


def decode_messages(
    items: Iterable[tuple[bytes, bytes]], wheel_keys: list[bytes], wheel_names: list[str]
) -> pa.Table:
    """Rows of one messages file; `wheel_keys[i]` is held by wheel `wheel_names[i]`."""
    ids: list[bytes] = []
    topics: list[str] = []
    deliver: list[int] = []
    created: list[int] = []
    body: list[int] = []
    states: list[int] = []
    fired: list[int] = []
    summary, fired_at = records.record_summary, records.record_fired_at_ms
    for message_id, raw in items:
        state, deliver_at_ms, created_at_ms, topic, body_bytes = summary(raw)
        fired.append(fired_at(raw))
        ids.append(message_id)
        topics.append(topic)
        deliver.append(deliver_at_ms)
        created.append(created_at_ms)
        body.append(body_bytes)
        states.append(state)
    state_codes = pa.array(states, pa.int8())
    return pa.table(
        {
            "message_id": pa.array(ids, pa.binary()).cast(pa.string()),
            "topic": pa.array(topics, pa.string()),
            "deliver_at_ms": pa.array(deliver, pa.int64()),
            "created_at_ms": pa.array(created, pa.int64()),
            "body_bytes": pa.array(body, pa.int64()),
            "state": _STATE_NAMES.take(state_codes),
            "wheel": _wheels(keys.wheel_keys(deliver, ids), state_codes, wheel_keys, wheel_names),
            "fired_at_ms": _fired(fired),
        }
    )


def _fired(fired_at_ms: list[int]) -> pa.Array:
    """The fire time of each record; null for one that never fired (a record keeps 0)."""
    times = pa.array(fired_at_ms, pa.int64())
    return pc.if_else(pc.greater(times, 0), times, pa.scalar(None, pa.int64()))


def _wheels(
    timer_keys: list[bytes], states: pa.Array, wheel_keys: list[bytes], wheel_names: list[str]
) -> pa.Array:
    """The wheel holding each scheduled timer's key; null for other states (and misses)."""
    if not timer_keys:
        return pa.array([], pa.string())
    found = pc.index_in(
        pa.array(timer_keys, pa.binary()), value_set=pa.array(wheel_keys, pa.binary())
    )
    wheel = pa.array(wheel_names, pa.string()).take(found)
    return pc.if_else(pc.equal(states, _SCHEDULED), wheel, pa.scalar(None, pa.string()))
