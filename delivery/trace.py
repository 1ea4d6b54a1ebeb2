"""Delivery attempts on their way into message traces (timerwheel.engine.trace_ops).

A dispatcher notes each batch it delivers and each failed attempt while it holds its
lock (one deque append a batch, its lists as they are: no I/O and no work a message
under the lock); whoever leaves the dispatcher next (`flush`, from
`DeliveryHub.next_batch`, `release` or `nack`) hands what is noted to the engine in
one call, as groups (`timerwheel.engine.trace_ops.DeliveryEvents`), which does not wait for the
commit. A batch of first attempts is not noted but held for its Ack
(`timerwheel.delivery.first_deliveries`, which says when a held one is handed over after all): the
Ack carries them to the engine (`take_for_ack`), so such a batch costs no call.
Attempt counts thereby survive a restart:
a new hub asks the engine for the attempts of messages that fired before it started
(`AttemptPolicy.restore_attempts`), the only ones an earlier hub may have delivered.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

from timerwheel.delivery.first_deliveries import FirstDeliveries, Released
from timerwheel.engine.trace_ops import DeliveryEvents
from timerwheel.wheels.trace import TraceKind

DELIVERED, NACKED = int(TraceKind.DELIVERED), int(TraceKind.NACKED)


class DeliveryTrace:
    def __init__(
        self, engine, first_attempts: bool = True, hold_ms: int = 0,
        now_ms: Callable[[], int] | None = None,
    ) -> None:  # fmt: skip
        """`first_attempts=False` (`Settings.trace_first_deliveries`): DELIVERED events
        of attempt 1 are left out when handed over, every other event kept. `hold_ms`
        (`Settings.first_delivery_hold_ms`): how long first attempts wait for their
        Ack, by `now_ms` (the service's time as this process reads it); 0: not held."""
        self._engine = engine
        self._first_attempts = first_attempts
        self._noted: deque[DeliveryEvents] = deque()
        holding = first_attempts and hold_ms > 0 and now_ms is not None
        self._held = FirstDeliveries(hold_ms) if holding else None
        self._now_ms = now_ms
        self._held_lock = threading.Lock()  # a leaf: taken with a dispatcher's lock held

    def delivered(self, message_ids: list[str], attempts: list[int], subscriber: str) -> None:
        """One batch handed to `subscriber`: the lists are kept as given (the caller
        hands them over and changes them no more)."""
        if len(message_ids) != len(attempts):
            raise ValueError(f"{len(message_ids)} message ids but {len(attempts)} attempts")
        if self._held is not None and attempts.count(1) == len(attempts):  # one scan, in C
            with self._held_lock:
                self._note_released(self._held.hold(message_ids, subscriber, self._now_ms()))
            return
        if self._held is not None:  # a redelivery: an attempt 1 held goes first, in order
            self._release(message_ids)
        self._noted.append((DELIVERED, subscriber, message_ids, attempts))

    def failed(self, message_id: str, attempt: int, reason: str) -> None:
        self._release([message_id])
        self._noted.append((NACKED, reason, [message_id], [attempt]))

    def take_for_ack(self, message_ids: list[str]) -> list[bytes] | None:
        """The first deliveries of these ids, held until now, for their Ack to write into
        the acked records (`Engine.ack`'s trailers); None when nothing is held."""
        if self._held is None:
            return None
        with self._held_lock:
            if not len(self._held):
                return None
            return self._held.take_for_ack(message_ids)

    def ack_failed(
        self, message_ids: list[str], trailers: list[bytes] | None, acked: list[str] | None = None
    ) -> None:
        """The Ack that took them failed (for all but `acked`: another topic's, acked
        before): its first deliveries go as events instead."""
        if not trailers or self._held is None:
            return
        if acked:
            retired = set(acked)
            kept = [(m, t) for m, t in zip(message_ids, trailers, strict=True) if m not in retired]
            message_ids, trailers = [m for m, _ in kept], [t for _, t in kept]
        with self._held_lock:
            self._note_released(self._held.give_back(message_ids, trailers))

    def write_now(self, message_ids: list[str]) -> None:
        """Hand over what is noted and the held first attempts of these ids now (a `Get`
        with the trace is about to read them)."""
        self._release(message_ids)
        self.flush()

    def flush(self, everything: bool = False) -> None:
        """Hand what is noted to the engine (any thread; each event goes exactly once),
        with the held first attempts whose hold has ended (all of them: `everything`)."""
        if self._held is not None:
            with self._held_lock:
                if everything:
                    self._note_released(self._held.release_all())
                elif len(self._held):
                    self._note_released(self._held.release_due(self._now_ms()))
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

    def _release(self, message_ids: list[str]) -> None:
        if self._held is not None:
            with self._held_lock:
                if len(self._held):
                    self._note_released(self._held.release(message_ids))

    def _note_released(self, released: list[Released]) -> None:
        for subscriber, at_ms, message_ids in released:
            self._noted.append((DELIVERED, subscriber, message_ids, [1] * len(message_ids), at_ms))


def _without_first_attempts(group: DeliveryEvents):
    """The group without its DELIVERED events of attempt 1; None when nothing is left.
    A batch of first deliveries (the usual one) is dropped whole after one scan in C."""
    kind, text, message_ids, attempts = group[:4]
    if kind != DELIVERED or 1 not in attempts:
        return group
    kept = [(m, a) for m, a in zip(message_ids, attempts, strict=True) if a != 1]
    if not kept:
        return None
    return kind, text, [m for m, _ in kept], [a for _, a in kept], *group[4:]
