"""Delivery events for message traces: the writer operation that stores them.

Deliveries happen outside the writer (timerwheel.delivery.hub, possibly another process), which
reports them in groups: one per subscriber's batch (DELIVERED, the subscriber, the
batch's ids and their attempts) or per failed attempt (NACKED, why, one id). A group
crosses between processes as two plain lists, which pickle in C, and is staged with a
few calls in C for the whole group: half the cost to unpickle and stage of one tuple a
message (kind, attempt and text beside each id), and a quarter of its cost to note and
pickle in the delivery process (`python -m bench.ipc_bench`). The writer stamps the
events with its clock when it applies them, like every other event of a trace, so an
attempt's time is when the server recorded it: in the writer's next group commit after
the delivery (they linger for it: timerwheel.engine.linger), and never before the fire
or after the ack that the same delivery led to (the subscriber's ack is submitted after
it).

Each distinct (kind, attempt, text) of a group is encoded once and its bytes shared:
building and encoding a TraceEvent per message cost many times what the rest of the
staging does.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain
from typing import ClassVar

from timerwheel.engine.ops import Op, WriterContext
from timerwheel.store.batch import StagedBatch
from timerwheel.store.trace import encode_event
from timerwheel.wheels.trace import TraceEvent, TraceKind

# (TraceKind, text, message ids, their attempts): the events of one batch or failed
# attempt, at the time the writer applies them; a fifth element, when there, is the time
# they happened (first attempts held for their Ack that came too late or not at all:
# timerwheel.delivery.first_deliveries).
DeliveryEvents = tuple[int, str, list[str], list[int]] | tuple[int, str, list[str], list[int], int]
# Under load the writer commits every millisecond for fires anyway; idle, a delivery's
# events wait this long for an ack to share a commit with (the client gathers acks 10 ms).
TRACE_LINGER_MS = 10


@dataclass
class TraceOp(Op):
    """DELIVERED (text: the subscriber) and NACKED (text: why) events of many messages,
    in groups (`DeliveryEvents`), in the order they happened."""

    groups: list[DeliveryEvents] = field(default_factory=list)
    durable: ClassVar[bool] = False  # nobody waits on it (Engine.record_trace)
    linger_ms: ClassVar[int] = TRACE_LINGER_MS  # rides along with the next commit

    @property
    def weight(self) -> int:
        return sum(len(group[2]) for group in self.groups)

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> int:
        """Stage every event; a message's events keep their order (the groups', then the
        trace seqs `timerwheel.store.trace.TraceLog.stage` gives in staging order)."""
        staged = []
        for kind, text, message_ids, attempts, *happened in self.groups:
            at_ms = happened[0] if happened else now_ms
            values = {a: encode_event(_event(kind, a, text, at_ms)) for a in set(attempts)}
            ids = map(str.encode, message_ids)
            staged.append(zip(ids, map(values.__getitem__, attempts), strict=True))
        batch.trace.extend(chain.from_iterable(staged))
        return self.weight


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
