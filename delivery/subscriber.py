"""A Subscribe stream as the delivery hub sees it, and what it is handed.

A `Subscriber` is made by `DeliveryHub.subscribe` and bound to its topic's dispatcher
(`timerwheel.delivery.dispatcher.TopicDispatcher`) until `DeliveryHub.release`; the dispatcher
counts its `in_flight` against `max_in_flight` and hands it batches of `Delivered`. These types
live apart from both so that the dispatcher and the hub can import them without
importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from timerwheel.store.fired_record import FiredRecord

if TYPE_CHECKING:
    from timerwheel.delivery.dispatcher import TopicDispatcher


@dataclass(frozen=True, slots=True)
class Delivered:
    """One message handed to a subscriber."""

    fired: FiredRecord
    attempt: int


# A delivered message as a Subscribe stream takes it, in process or from the delivery
# process: (fire seq, message id, record as stored, attempt). Plain tuples: the stream
# only turns them into a DeliveryBatch (`timerwheel.server.service.delivery_batch`), and
# building a `Delivered` of a `FiredRecord` each in the worker was a cost a message that
# plain tuples avoid.
DeliveryRow = tuple[int, str, bytes, int]


def as_rows(batch: list[Delivered]) -> list[DeliveryRow]:
    """A hub's batch as the stream takes it."""
    return [(d.fired.seq, d.fired.message_id, d.fired.record, d.attempt) for d in batch]


@dataclass(eq=False)
class Subscriber:
    """One Subscribe stream. `close()` may be called from any thread (stream callbacks)."""

    topic: str
    max_in_flight: int
    identity: str = ""  # who it counts against (timerwheel.security.limits.caller_identity)
    name: str = ""  # who it is in message traces (SubscribeRequest.consumer, or the peer)
    in_flight: int = 0
    # Silly-window avoidance (`TopicDispatcher.holds_back`): once a batch filled its
    # room (`full`), its next batch waits until `reopen_room` is free again.
    full: bool = False
    reopen_room: int = 1
    closed: bool = False
    # Its consumer released messages (a Nack with `release`): it is stopping, so it is
    # handed no more and its stream ends once it holds none (`DeliveryHub.next_batch`).
    draining: bool = False
    connected_at_ms: int = 0  # when it subscribed (the service's clock), for Consumers
    # Set by DeliveryHub.subscribe, cleared by DeliveryHub.release; None before and after.
    _dispatcher: TopicDispatcher | None = field(default=None, repr=False)

    def close(self) -> None:
        dispatcher = self._dispatcher
        if dispatcher is None:
            self.closed = True
            return
        with dispatcher.cond:
            self.closed = True
            dispatcher.cond.notify_all()
