"""Delivery events for message traces: the writer operation that stores them.

Deliveries happen outside the writer (server.delivery, possibly another process), which
reports them in batches as plain tuples (id, kind, attempt, text): cheap to pickle
across processes. The writer stamps them with its clock when it applies them, like
every other event of a trace, so an attempt's time is when the server recorded it: in
the writer's next group commit after the delivery (they linger for it: engine.linger),
and never before the fire or after the ack that the same delivery led to (the
subscriber's ack is submitted after it).

The events of one op mostly differ only in their message id (one subscriber's batch:
DELIVERED, attempt 1), so each distinct (kind, attempt, text) is encoded once and its
bytes shared: building and encoding a TraceEvent per message cost ~3 us each.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from engine.ops import Op, WriterContext, stage_encoded_trace
from store.batch import StagedBatch
from store.trace import encode_event
from wheels.trace import TraceEvent, TraceKind

DeliveryEvent = tuple[str, int, int, str]  # (message id, TraceKind, attempt, text)
# Under load the writer commits every millisecond for fires anyway; idle, a delivery's
# events wait this long for an ack to share a commit with (the client gathers acks 10 ms).
TRACE_LINGER_MS = 10


@dataclass
class TraceOp(Op):
    """DELIVERED (text: the subscriber) and NACKED (text: why) events of many messages."""

    events: list[DeliveryEvent] = field(default_factory=list)
    durable: ClassVar[bool] = False  # nobody waits on it (Engine.record_trace)
    linger_ms: ClassVar[int] = TRACE_LINGER_MS  # rides along with the next commit

    @property
    def weight(self) -> int:
        return len(self.events)

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> int:
        encoded: dict[tuple[int, int, str], bytes] = {}
        for message_id, kind, attempt, text in self.events:
            value = encoded.get((kind, attempt, text))
            if value is None:
                value = encoded[kind, attempt, text] = encode_event(
                    _event(kind, attempt, text, now_ms)
                )
            stage_encoded_trace(batch, message_id, value)
        return len(self.events)


def _event(kind: int, attempt: int, text: str, now_ms: int) -> TraceEvent:
    delivered = kind == TraceKind.DELIVERED
    return TraceEvent(
        TraceKind(kind), now_ms, attempt=attempt,
        subscriber=text if delivered else "", detail="" if delivered else text,
    )  # fmt: skip


@dataclass
class TraceBarrier(Op):
    """Nothing to write: queued behind lingering trace events, it makes the writer commit
    them now, and its future says when they can be read (Engine.get with the trace)."""

    durable: ClassVar[bool] = False

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> None:
        return None
