"""The byte budget every topic's dispatcher shares (`Settings.max_delivery_bytes`).

A dispatcher holds the bodies of the fired messages it tracks (queued, or in flight at a
subscriber) in memory, so all of them together stop reading from the store at this
budget: memory is bounded by it, never by the backlog. A dispatcher whose read stopped at
the budget registers (`wait`); bytes another topic's Ack frees wake it (`wake_others`),
so it does not wait for an Ack of its own topic or its subscribers' idle wake.

Its lock is a leaf: taken with a dispatcher's cond held, and nothing is taken under it.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from timerwheel.delivery.dispatcher import TopicDispatcher


class DeliveryBudget:
    """The bodies all dispatchers hold, against `max_bytes`."""

    def __init__(self, max_bytes: int) -> None:
        self._max_bytes = max_bytes
        self._held = 0
        self._lock = threading.Lock()
        self._short: set[TopicDispatcher] = set()  # their reads wait for the budget

    def hold(self, size: int) -> None:
        """`size` bytes more are held (less, when negative)."""
        with self._lock:
            self._held += size

    def room(self) -> int:
        """What the dispatchers may still read before they hold `max_bytes`."""
        with self._lock:
            return self._max_bytes - self._held

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    def wait(self, dispatcher: TopicDispatcher) -> None:
        """`dispatcher`'s reads stopped at the budget: bytes any topic frees wake it."""
        with self._lock:
            self._short.add(dispatcher)

    def stop_waiting(self, dispatcher: TopicDispatcher) -> None:
        with self._lock:
            self._short.discard(dispatcher)

    def wake_others(self, freed_by: TopicDispatcher) -> None:
        """Bodies acked in `freed_by` (which woke its own subscribers) left the budget:
        the other dispatchers whose reads stopped at it may go on. Each is woken under
        its own cond, with `freed_by`'s released by the caller: two conds are never held
        at once. A dispatcher that stops at the budget looks at it again once registered
        (`TopicDispatcher.refill`), so bytes freed meanwhile are not missed."""
        with self._lock:
            waiting = [d for d in self._short if d is not freed_by]
        for dispatcher in waiting:
            with dispatcher.cond:
                if dispatcher.short_of_bytes:
                    dispatcher.cond.notify_all()
