"""TimerAdmin.InFlight and TimerAdmin.Consumers: what the delivery hub holds, joined with
the engine's backlog counts (the console's in-flight and consumers views).

The hub knows each tracked message's attempt and the stream it is in flight at, but it
reads a topic's fired messages only for its subscribers, as many as they have room for:
the rest wait in the store, and the answer says how many and why. The engine knows every
topic's backlog (TimerAdmin.Topics). With `serve --workers N` the hub is the delivery
process's (`DeliveryApi`), so every worker answers alike; in cluster mode, this node's.
"""

from __future__ import annotations

from typing import Any

from timerwheel.delivery.api import DeliveryApi
from timerwheel.delivery.inspect import untracked_reason
from timerwheel.engine.api import TimerApi
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import InvalidArgument
from timerwheel.wheels.validation import validate_topic

IN_FLIGHT_DEFAULT = 100
# InFlightMessage's fields, in the order of a hub's row (timerwheel.delivery.inspect).
IN_FLIGHT_FIELDS = (
    "message_id", "fire_seq", "attempt", "in_flight", "consumer", "peer", "ack_due_in_ms",
    "deliver_at_ms", "fired_at_ms",
)  # fmt: skip
IN_FLIGHT_MAX = 1_000
# Topics whose oldest un-acked message one Consumers call reads (one store read each).
LAG_TOPICS_MAX = 200


def backlog(engine: TimerApi) -> dict[str, tuple[int, int]]:
    """{topic: (pending, fired_unacked)} of every topic with a backlog."""
    return {topic: (pending, unacked) for topic, pending, unacked in engine.topics()}


def in_flight(engine: TimerApi, hub: DeliveryApi[Any], request: pb.InFlightRequest):
    if not request.topic:
        raise InvalidArgument("topic", "", "give the topic whose messages to show")
    validate_topic(request.topic, engine.settings)
    if not 0 <= request.limit <= IN_FLIGHT_MAX:
        raise InvalidArgument(
            "limit", request.limit, f"must be 0..{IN_FLIGHT_MAX:,} (0: {IN_FLIGHT_DEFAULT})"
        )
    rows, tracked, subscribers = hub.in_flight(request.topic, request.limit or IN_FLIGHT_DEFAULT)
    fired_unacked = backlog(engine).get(request.topic, (0, 0))[1]
    fields = IN_FLIGHT_FIELDS
    messages = [pb.InFlightMessage(**dict(zip(fields, row, strict=True))) for row in rows]
    return pb.InFlightResponse(
        messages=messages, fired_unacked=fired_unacked, tracked=tracked,
        untracked_reason=untracked_reason(subscribers, fired_unacked, tracked),
    )  # fmt: skip


def consumers(engine: TimerApi, hub: DeliveryApi[Any], request: pb.ConsumersRequest):
    if request.topic:
        validate_topic(request.topic, engine.settings)
    streams = hub.consumers(request.topic)
    counts = backlog(engine)
    if request.topic:
        counts = {request.topic: counts.get(request.topic, (0, 0))}
    topics = sorted(set(counts) | {s["topic"] for s in streams})
    waiting = [t for t in topics if counts.get(t, (0, 0))[1] > 0][:LAG_TOPICS_MAX]
    oldest = hub.oldest_fired_at(waiting) if waiting else {}
    lag = []
    for topic in topics:
        mine = [s for s in streams if s["topic"] == topic]
        pending, fired_unacked = counts.get(topic, (0, 0))
        lag.append(pb.TopicLag(
            topic=topic, consumers=len(mine), pending=pending, fired_unacked=fired_unacked,
            in_flight=sum(s["in_flight"] for s in mine),
            oldest_unacked_fired_at_ms=oldest.get(topic, 0),
        ))  # fmt: skip
    streams.sort(key=lambda s: (s["topic"], s["connected_at_ms"]))
    return pb.ConsumersResponse(consumers=[pb.ConsumerInfo(**s) for s in streams], lag=lag)
