"""Delivery attempts on their way into message traces (engine.trace_ops).

A dispatcher notes each delivery and each failed attempt while it holds its lock (a
deque append: no I/O under the lock); whoever leaves the dispatcher next (`flush`, from
`DeliveryHub.next_batch`, `release` or `nack`) hands what is noted to the engine in
one call, which does not wait for the commit. Attempt counts thereby survive a restart:
a new hub asks the engine for the attempts of messages that fired before it started
(`DeliveryHub.restore_attempts`), the only ones an earlier hub may have delivered.
"""

from __future__ import annotations

from collections import deque

from wheels.trace import TraceKind


class DeliveryTrace:
    def __init__(self, engine) -> None:
        self._engine = engine
        self._noted: deque[tuple[str, int, int, str]] = deque()

    def delivered(self, message_ids: list[str], attempts: list[int], subscriber: str) -> None:
        kind = int(TraceKind.DELIVERED)
        self._noted.extend(
            (message_id, kind, attempt, subscriber)
            for message_id, attempt in zip(message_ids, attempts, strict=True)
        )

    def failed(self, message_id: str, attempt: int, reason: str) -> None:
        self._noted.append((message_id, int(TraceKind.NACKED), attempt, reason))

    def flush(self) -> None:
        """Hand what is noted to the engine (any thread; each event goes exactly once)."""
        events = []
        try:
            while True:
                events.append(self._noted.popleft())
        except IndexError:
            pass
        if events:
            self._engine.record_trace(events)
