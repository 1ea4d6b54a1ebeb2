"""Writer operations that move an existing message: to a new time (Reschedule) or to its
dead-letter topic. Like every operation (`timerwheel.engine.ops`), each checks before it stages."""

from __future__ import annotations

from dataclasses import dataclass, replace

from timerwheel.common import State
from timerwheel.engine.ops import Op, WriterContext, unschedule
from timerwheel.engine.send_op import PreparedSend, stage_new
from timerwheel.store import extras as extras_cf
from timerwheel.store import records
from timerwheel.store import trace as trace_cf
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.domain import FailedPrecondition, NotFound, When
from timerwheel.wheels.trace import TraceEvent, TraceKind, assemble
from timerwheel.wheels.validation import dead_letter_topic

DEAD_LETTER_PREFIX = "timerwheel.dead_letter."  # properties a dead letter carries


@dataclass
class RescheduleOp(Op):
    """Move a SCHEDULED timer to a new time: old wheel key out, record updated, new key in
    (or fired at once when the new time has come), all in this one batch."""

    message_id: str = ""
    when: When | None = None
    deliver_at_ms: int = 0  # resolved from `when` in the caller's thread

    def reads(self) -> list[bytes]:
        return [self.message_id.encode()]

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> int:
        raw = ctx.store.lookup(batch, self.message_id.encode())
        if raw is None:
            raise NotFound(f"message_id={self.message_id!r}: no such timer")
        state = records.record_state(raw)
        if state is not State.SCHEDULED:
            raise FailedPrecondition(
                f"message_id={self.message_id!r}: already {state.name}; "
                "only a SCHEDULED timer can be rescheduled"
            )
        assert self.when is not None
        unschedule(ctx, batch, self.message_id, raw)
        if records.is_series(raw):  # its next occurrence moves: keep its number (and pause)
            extras = extras_cf.get_extras(ctx.store, batch, self.message_id.encode())
            options, number, _, paused = extras_cf.decode_series_state(extras or b"{}")
            moved = extras_cf.encode_extras(options, number, self.deliver_at_ms, paused)
            extras_cf.stage_extras(batch, self.message_id.encode(), moved)
        record = records.with_schedule(raw, self.when, self.deliver_at_ms)
        topic = records.record_topic(raw)
        moved = PreparedSend(None, self.message_id, self.deliver_at_ms, True, record, topic)
        wheel = stage_new(ctx, batch, moved, now_ms, sent=False)
        event = TraceEvent(
            TraceKind.RESCHEDULED, now_ms, wheel=wheel, deliver_at_ms=self.deliver_at_ms
        )
        trace_cf.stage_event(batch, self.message_id, event)
        return self.deliver_at_ms


@dataclass
class DeadLetterOp(Op):
    """A FIRED message that ran out of delivery attempts moves to its dead-letter topic:
    same id and body, its `ready` entry moved to the DLQ topic under a new fire sequence,
    and properties ``timerwheel.dead_letter.{topic,attempts,reason,at_ms}`` added. Its
    send options go (the DLQ holds it with unlimited attempts). Skipped (False) when
    the message is no longer FIRED on `topic`: acked or moved meanwhile."""

    topic: str = ""
    message_id: str = ""
    attempts: int = 0
    reason: str = ""

    def reads(self) -> list[bytes]:
        return [self.message_id.encode()]

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> bool:
        message_id = self.message_id.encode()
        raw = ctx.store.lookup(batch, message_id)
        if raw is None or not records.is_fired(raw) or records.record_topic(raw) != self.topic:
            return False
        options = None
        if records.has_extras(raw):
            extras = extras_cf.get_extras(ctx.store, batch, message_id)
            options = extras_cf.decode_extras(extras) if extras else None
        timer = records.decode_timer(self.message_id, raw)
        target = dead_letter_topic(self.topic, options)
        properties = {
            **timer.properties,
            DEAD_LETTER_PREFIX + "topic": self.topic,
            DEAD_LETTER_PREFIX + "attempts": str(self.attempts),
            DEAD_LETTER_PREFIX + "reason": self.reason,
            DEAD_LETTER_PREFIX + "at_ms": str(now_ms),
        }
        _trace_dead_letter(ctx, batch, self.message_id, raw, target, now_ms)
        seq = ctx.scheduler.take_fire_seqs(1)
        moved = replace(timer, topic=target, properties=properties, fired_at_ms=now_ms)
        record = records.encode_timer(replace(moved, ready_seq=seq))
        extras_cf.stage_dead_letter(ctx.store, batch, message_id, raw, record, target, seq)
        return True


def _trace_dead_letter(
    ctx: WriterContext, batch: StagedBatch, message_id: str, raw: bytes, target: str, now_ms: int
) -> None:
    """The record's fire time is about to become the dead letter's: its first fire is
    written down as an event first, as its trace shows it now, then the move."""
    facts = records.trace_facts(raw)
    for event in assemble(facts, ctx.store.trace.read(message_id)):
        if event.kind is TraceKind.FIRED and event.at_ms == facts.fired_at_ms:
            trace_cf.stage_event(batch, message_id, event)
    trace_cf.stage_event(
        batch, message_id, TraceEvent(TraceKind.DEAD_LETTERED, now_ms, detail=target)
    )
