"""Delivery attempts on their way into message traces (engine.trace_ops).

A dispatcher notes each batch it delivers and each failed attempt while it holds its
lock (one deque append a batch, its lists as they are: no I/O and no work a message
under the lock); whoever leaves the dispatcher next (`flush`, from
`DeliveryHub.next_batch`, `release` or `nack`) hands what is noted to the engine in
one call, as groups (`engine.trace_ops.DeliveryEvents`), which does not wait for the
commit. Attempt counts thereby survive a restart:
a new hub asks the engine for the attempts of messages that fired before it started
(`DeliveryHub.restore_attempts`), the only ones an earlier hub may have delivered.
"""

from __future__ import annotations

from collections import deque

from wheels.trace import TraceKind

DELIVERED, NACKED = int(TraceKind.DELIVERED), int(TraceKind.NACKED)


class DeliveryTrace:
    def __init__(self, engine, first_attempts: bool = True) -> None:
        """`first_attempts=False` (`Settings.trace_first_deliveries`): DELIVERED events
        of attempt 1 are left out when handed over, every other event kept."""
        self._engine = engine
        self._first_attempts = first_attempts
        self._noted: deque[tuple[int, str, list[str], list[int]]] = deque()

    def delivered(self, message_ids: list[str], attempts: list[int], subscriber: str) -> None:
        """One batch handed to `subscriber`: the lists are kept as given (the caller
        hands them over and changes them no more)."""
        if len(message_ids) != len(attempts):
            raise ValueError(f"{len(message_ids)} message ids but {len(attempts)} attempts")
        self._noted.append((DELIVERED, subscriber, message_ids, attempts))

    def failed(self, message_id: str, attempt: int, reason: str) -> None:
        self._noted.append((NACKED, reason, [message_id], [attempt]))

    def flush(self) -> None:
        """Hand what is noted to the engine (any thread; each event goes exactly once)."""
        groups = []
        try:
            while True:
                groups.append(self._noted.popleft())
        except IndexError:
            pass
        if not self._first_attempts:
            groups = [kept for group in groups if (kept := _without_first_attempts(group))]
        if groups:
            self._engine.record_trace(groups)


def _without_first_attempts(group: tuple[int, str, list[str], list[int]]):
    """The group without its DELIVERED events of attempt 1; None when nothing is left.
    A batch of first deliveries (the usual one) is dropped whole after one scan in C."""
    kind, text, message_ids, attempts = group
    if kind != DELIVERED or 1 not in attempts:
        return group
    kept = [(m, a) for m, a in zip(message_ids, attempts, strict=True) if a != 1]
    if not kept:
        return None
    return kind, text, [m for m, _ in kept], [a for _, a in kept]
