"""Decoding exported ``messages`` records into report rows (columns of an Arrow batch).

The record codec is store.records; this only picks the report's columns out of it and
looks up which wheel holds a scheduled timer.
"""

from __future__ import annotations

import pyarrow as pa

from store import keys, records
from wheels.domain import State

_SCHEDULED = State.SCHEDULED.value
_STATE_NAMES = {state.value: state.name for state in State}


class RowDecoder:
    """Accumulates decoded rows column by column; `take_batch` empties it."""

    def __init__(self, wheel_of: dict[bytes, str]) -> None:
        self._wheel_of = wheel_of  # wheel key -> "hour" / "minute" / "second"
        self._clear()

    def _clear(self) -> None:
        self.rows = 0
        self._ids: list[str] = []
        self._topics: list[str] = []
        self._deliver: list[int] = []
        self._created: list[int] = []
        self._body: list[int] = []
        self._state: list[str] = []
        self._wheel: list[str | None] = []

    def add(self, message_id: bytes, raw: bytes) -> None:
        state, deliver_at_ms, created_at_ms, topic, body_bytes = records.record_summary(raw)
        wheel = None
        if state == _SCHEDULED:
            wheel = self._wheel_of.get(keys.time_bound(deliver_at_ms) + message_id)
        self._ids.append(message_id.decode())
        self._topics.append(topic)
        self._deliver.append(deliver_at_ms)
        self._created.append(created_at_ms)
        self._body.append(body_bytes)
        self._state.append(_STATE_NAMES[state])
        self._wheel.append(wheel)
        self.rows += 1

    def take_batch(self) -> pa.RecordBatch:
        from capacity.datasource import ARROW_SCHEMA

        batch = pa.RecordBatch.from_arrays(
            [
                pa.array(self._ids, pa.string()),
                pa.array(self._topics, pa.string()),
                pa.array(self._deliver, pa.int64()),
                pa.array(self._created, pa.int64()),
                pa.array(self._body, pa.int64()),
                pa.array(self._state, pa.string()),
                pa.array(self._wheel, pa.string()),
            ],
            schema=ARROW_SCHEMA,
        )
        self._clear()
        return batch
