"""Writer operations of bulk cancel, purge and redrive (timerwheel.wheels.bulk says what
each does). The engine finds the candidate ids on the caller's thread
(timerwheel.store.bulk); the operation checks each one again against the filter and its
state as this batch leaves it, so what changed in between is left alone, and changes
the rest in this one group commit: a call is all or nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from timerwheel.common import State
from timerwheel.engine.ops import Op, WriterContext
from timerwheel.store import bulk as bulk_cf
from timerwheel.store import extras as extras_cf
from timerwheel.store import records
from timerwheel.store import trace as trace_cf
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.bulk import DEAD_LETTER_ORIGIN, DEAD_LETTER_PREFIX, TimerFilter
from timerwheel.wheels.trace import TraceEvent, TraceKind, fire_stored


@dataclass
class BulkCancelOp(Op):
    """Cancel the SCHEDULED timers among `message_ids` that `filter` selects; with
    `purge`, also retire the FIRED ones (ready entry out, CANCELLED). Returns
    (cancelled, {topic: purged FIRED ids}, the cancelled ids)."""

    filter: TimerFilter = field(default_factory=TimerFilter)
    message_ids: list[str] = field(default_factory=list)
    purge: bool = False

    @property
    def weight(self) -> int:
        return max(len(self.message_ids), 1)

    def reads(self) -> list[bytes]:
        return [message_id.encode() for message_id in self.message_ids]

    def apply(
        self, ctx: WriterContext, batch: StagedBatch, now_ms: int
    ) -> tuple[int, dict[str, list[str]], list[str]]:
        cancelled: list[str] = []
        purged: dict[str, list[str]] = {}
        expire_at_ms = now_ms + ctx.retention_ms
        for message_id in dict.fromkeys(self.message_ids):
            key = message_id.encode()
            raw = ctx.store.lookup(batch, key)
            if raw is None:
                continue
            topic = records.record_topic(raw)
            if not self.filter.matches(message_id, topic, records.record_deliver_at_ms(raw)):
                continue
            state = records.record_state(raw)
            if state is State.SCHEDULED:
                wheels = ctx.scheduler.wheel_candidates(records.record_deliver_at_ms(raw))
                ctx.store.stage_cancel(
                    batch, message_id, raw, [w.name for w in wheels], now_ms, expire_at_ms
                )
                cancelled.append(message_id)
            elif state is State.FIRED and self.purge:
                bulk_cf.stage_purge_fired(ctx.store, batch, key, raw, now_ms, expire_at_ms)
                purged.setdefault(topic, []).append(message_id)
        return len(cancelled), purged, cancelled


@dataclass
class RedriveOp(Op):
    """Move the dead letters among `message_ids` (FIRED on `dlq_topic`, selected by
    `filter` by the topic they came from) back to that topic: a new fire sequence there,
    the `timerwheel.dead_letter.*` properties dropped, a REDRIVEN event in the trace.
    Their attempts start again from 1 there. Returns the ids moved."""

    dlq_topic: str = ""
    filter: TimerFilter = field(default_factory=TimerFilter)
    message_ids: list[str] = field(default_factory=list)

    @property
    def weight(self) -> int:
        return max(len(self.message_ids), 1)

    def reads(self) -> list[bytes]:
        return [message_id.encode() for message_id in self.message_ids]

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> list[str]:
        moved = []
        for message_id in dict.fromkeys(self.message_ids):
            key = message_id.encode()
            raw = ctx.store.lookup(batch, key)
            if raw is None or not records.is_fired(raw):
                continue
            if records.record_topic(raw) != self.dlq_topic:
                continue
            timer = records.decode_timer(message_id, raw)
            origin = timer.properties.get(DEAD_LETTER_ORIGIN, "")
            if not origin or not self.filter.matches(message_id, origin, timer.deliver_at_ms):
                continue
            _trace_redrive(ctx, batch, message_id, raw, origin, now_ms)
            properties = {
                k: v for k, v in timer.properties.items() if not k.startswith(DEAD_LETTER_PREFIX)
            }
            seq = ctx.scheduler.take_fire_seqs(1)
            back = replace(
                timer, topic=origin, properties=properties, fired_at_ms=now_ms, ready_seq=seq
            )
            # The same move as a dead letter's, the other way (no send options to drop:
            # dead-lettering dropped them).
            extras_cf.stage_dead_letter(
                ctx.store, batch, key, raw, records.encode_timer(back), origin, seq
            )
            moved.append(message_id)
        return moved


def _trace_redrive(
    ctx: WriterContext, batch: StagedBatch, message_id: str, raw: bytes, origin: str, now_ms: int
) -> None:
    """As for a dead letter (timerwheel.engine.move_ops): the record's fire time is about
    to become the redriven one, so its fire into the dead-letter topic is written down as
    an event first, then the move."""
    facts = records.trace_facts(raw)
    stored = ctx.store.trace.read(message_id)
    if facts.fired_at_ms and not fire_stored(stored, facts.fired_at_ms):
        fired = TraceEvent(TraceKind.FIRED, facts.fired_at_ms)  # into the DLQ: no wheel
        trace_cf.stage_event(batch, message_id, fired)
    trace_cf.stage_event(batch, message_id, TraceEvent(TraceKind.REDRIVEN, now_ms, detail=origin))
