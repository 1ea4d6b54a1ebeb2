"""What the delivery hub holds, for an operator: the messages it tracks and its streams.

Read-only views of `DeliveryHub` (timerwheel.delivery.hub) for TimerAdmin.InFlight and
TimerAdmin.Consumers (the console's in-flight and consumers views). Each takes a
dispatcher's lock for as long as it copies what it shows, never across a store read, so
delivery waits for a copy, not for the engine. Rows are plain tuples and dicts: with
`serve --workers N` they cross from the delivery process as they are.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timerwheel.store.records import record_deliver_at_ms, record_fired_at_ms

if TYPE_CHECKING:
    from timerwheel.delivery.dispatcher import TopicDispatcher
    from timerwheel.delivery.subscriber import Subscriber
    from timerwheel.engine.api import FiredSource

# (message_id, fire seq, attempt, in flight, consumer, peer, ack due in ms, deliver at ms,
# fired at ms): a message as InFlight shows it.
InFlightRow = tuple[str, int, int, bool, str, str, int, int, int]


def in_flight_rows(
    dispatcher: TopicDispatcher | None, now_ms: int, limit: int
) -> tuple[list[InFlightRow], int, int]:
    """(the dispatcher's tracked messages, in flight first (the oldest deadline first), then
    waiting ones by fire sequence, at most `limit`; how many it tracks; its subscribers).
    Call without its lock; None (no dispatcher: nobody reads the topic) holds none."""
    if dispatcher is None:
        return [], 0, 0
    rows: list[tuple[tuple[int, int, int], InFlightRow]] = []
    with dispatcher.cond:
        for message_id, entry in dispatcher.entries.items():
            owner, record = entry.owner, entry.fired.record
            flying = owner is not None
            row: InFlightRow = (
                message_id, entry.fired.seq, entry.attempt, flying,
                owner.name if owner is not None else "",
                owner.identity if owner is not None else "",
                entry.deadline_ms - now_ms if flying else 0,
                record_deliver_at_ms(record), record_fired_at_ms(record),
            )  # fmt: skip
            flight_order = (0, entry.deadline_ms, entry.fired.seq)
            rows.append((flight_order if flying else (1, 0, entry.fired.seq), row))
        tracked, subscribers = len(dispatcher.entries), dispatcher.subscribers
    rows.sort(key=lambda pair: pair[0])
    return [row for _, row in rows[:limit]], tracked, subscribers


def oldest_fired_at(engine: FiredSource, topics: list[str]) -> dict[str, int]:
    """When each topic's oldest fired, un-acked message fired (topics with one): the
    first of its `ready` entries, one store read a topic."""
    oldest = {}
    for topic in topics:
        first = engine.fetch_deliveries(topic, 0, 1)
        if first:
            oldest[topic] = record_fired_at_ms(first[0].record)
    return oldest


def consumer_row(subscriber: Subscriber) -> dict:
    """A Subscribe stream as Consumers shows it."""
    return {
        "topic": subscriber.topic, "consumer": subscriber.name, "peer": subscriber.identity,
        "in_flight": subscriber.in_flight, "max_in_flight": subscriber.max_in_flight,
        "connected_at_ms": subscriber.connected_at_ms, "draining": subscriber.draining,
    }  # fmt: skip


def untracked_reason(subscribers: int, fired_unacked: int, tracked: int) -> str:
    """Why the hub holds fewer of a topic's fired, un-acked messages than there are."""
    if fired_unacked <= tracked:
        return ""
    missing = fired_unacked - tracked
    if subscribers == 0:
        return (
            f"{missing} fired, un-acked messages wait in the store: the topic has no "
            "Subscribe stream, and the delivery hub reads a topic's messages only for its "
            "subscribers (so no consumer has them)"
        )
    return (
        f"{missing} fired, un-acked messages wait in the store: the delivery hub reads only "
        "as many as the topic's subscribers have room for (max_in_flight), so no consumer "
        "has them yet"
    )
