"""Firing recurring series, inside the writer's batch.

A series is one SCHEDULED record under the series id, flagged `records.SERIES_FLAG`,
with one wheel key at the time of its next occurrence; its `extras` entry holds the
schedule (`Repeat`), the number `n` of the next occurrence and that occurrence's
schedule time `at`. When its key comes due, the store does not fire the record itself
but hands it here (`StagedBatch.series_due`), and in the same batch:

1. occurrence n is stored FIRED under its own id ``<series id>#<n>`` with its own
   `ready` entry, deliver_at_ms = its schedule time, the series' topic, body and
   properties plus ``timerwheel.series.id`` and ``timerwheel.series.occurrence``;
2. the series moves to occurrence n+1: its wheel key and record to the next time (by the
   missed policy, `timerwheel.wheels.recurrence`), its `extras` to n+1 — or, past `max_count` or
   `end_at_ms`, the series record is retired as ACKED (kept for the retention period).

Both are one atomic WriteBatch: a crash loses or repeats no occurrence, and the numbering
makes an occurrence id unique. With FIRE_EACH, occurrences already due fire in the same
batch, at most `MAX_CATCH_UP` of them; the rest follow one millisecond later. The series'
catch-up bounds (`Repeat.catch_up_window_ms`, `max_catch_up`) skip missed occurrences
first (`timerwheel.wheels.recurrence`).

Every change of a series (sent, moved, paused, stepped, retired) is noted in the batch
(`StagedBatch.series_changes`) for the engine's series listeners: cluster mode logs each
one, so a takeover continues the series where it was.

A paused series (`PauseOp`: a flag in its `extras`) keeps its record and its wheel key:
when its time comes it fires nothing and moves on to its first time after now, so every
time that comes round while it is paused is skipped, none caught up when it is resumed,
and resuming is only the flag again. A skipped fire sequence is handed back to the count
(`Scheduler.fire_seq_unused`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import NamedTuple

from timerwheel.common import State
from timerwheel.engine.ops import Op, WriterContext
from timerwheel.store import extras as extras_cf
from timerwheel.store import records
from timerwheel.store import trace as trace_cf
from timerwheel.store.batch import SeriesChange, StagedBatch
from timerwheel.wheels.domain import FailedPrecondition, NotFound, SendOptions, When, WhenKind
from timerwheel.wheels.recurrence import (
    MAX_CATCH_UP,
    catch_up_from,
    finished,
    first_after,
    next_occurrence_ms,
)
from timerwheel.wheels.trace import TraceEvent, TraceKind

SERIES_ID = "timerwheel.series.id"
SERIES_OCCURRENCE = "timerwheel.series.occurrence"


def occurrence_id(series_id: str, number: int) -> str:
    return f"{series_id}#{number}"


def fire_due_series(ctx: WriterContext, batch: StagedBatch, now_ms: int) -> None:
    """Fire every series the batch found due (see the module docstring)."""
    while batch.series_due:
        message_id, raw, topic, seq = batch.series_due.pop()
        _fire_one(ctx, batch, now_ms, message_id, raw, topic, seq)


def _fire_one(
    ctx: WriterContext, batch: StagedBatch, now_ms: int, message_id: bytes, raw: bytes,
    topic: str, seq: int,
) -> None:  # fmt: skip
    extras = extras_cf.get_extras(ctx.store, batch, message_id)
    assert extras is not None, f"series {message_id!r} has no extras entry"
    options, number, at_ms, paused = extras_cf.decode_series_state(extras)
    repeat = options.repeat
    assert repeat is not None
    series_id = message_id.decode()
    skip_to = first_after if paused else catch_up_from
    at_ms = skip_to(repeat, at_ms, now_ms)
    occurrences: list[tuple[int, int]] = []
    if at_ms > now_ms:  # paused, or nothing missed is inside the catch-up window
        ctx.scheduler.fire_seq_unused()
    else:
        for fired in range(1, MAX_CATCH_UP + 1):
            _stage_occurrence(ctx, batch, series_id, raw, options, number, at_ms, seq, now_ms)
            occurrences.append((number, at_ms))
            number += 1
            at_ms = next_occurrence_ms(repeat, at_ms, now_ms, fired)
            if at_ms > now_ms or fired == MAX_CATCH_UP or finished(repeat, number, at_ms):
                break
            seq = ctx.scheduler.take_fire_seqs(1)  # FIRE_EACH: a missed one, due already
    if finished(repeat, number, at_ms):
        retired = records.with_transition(raw, State.ACKED, acked_at_ms=now_ms)
        extras_cf.stage_retire(ctx.store, batch, series_id, retired, now_ms + ctx.retention_ms)
        batch.series_changes.append(SeriesChange(series_id, None, None, tuple(occurrences)))
        return
    fire_at_ms = max(at_ms, now_ms + 1)
    wheel = ctx.scheduler.placement(fire_at_ms)
    assert wheel is not None
    next_record = records.with_deliver_at(raw, fire_at_ms)
    ctx.store.stage_schedule(
        batch, message_id, next_record, fire_at_ms, topic.encode(), wheel.name,
    )  # fmt: skip
    next_extras = extras_cf.encode_extras(options, number, at_ms, paused)
    extras_cf.stage_extras(batch, message_id, next_extras)
    change = SeriesChange(series_id, next_record, next_extras, tuple(occurrences))
    batch.series_changes.append(change)


def _stage_occurrence(
    ctx: WriterContext, batch: StagedBatch, series_id: str, raw: bytes, options: SendOptions,
    number: int, at_ms: int, seq: int, now_ms: int,
) -> None:  # fmt: skip
    """Occurrence `number`, FIRED now under its own id, with the series' delivery options."""
    series = records.decode_timer(series_id, raw)
    occurrence = replace(
        series, message_id=occurrence_id(series_id, number), deliver_at_ms=at_ms,
        when=When(WhenKind.DELIVER_AT, at_ms), created_at_ms=now_ms, state=State.FIRED,
        fired_at_ms=now_ms, ready_seq=seq,
        properties={**series.properties, SERIES_ID: series_id, SERIES_OCCURRENCE: str(number)},
    )  # fmt: skip
    record = records.encode_timer(occurrence)
    occurrence_key = occurrence.message_id.encode()
    if options.max_attempts is not None or options.dead_letter_topic or options.retry:
        delivery = SendOptions(options.max_attempts, options.dead_letter_topic, retry=options.retry)
        record = records.with_extras_flag(record)
        extras_cf.stage_extras(batch, occurrence_key, extras_cf.encode_extras(delivery))
    ctx.store.stage_fire_new(batch, occurrence_key, record, series.topic, seq)


class SeriesPause(NamedTuple):
    """What pausing or resuming a series did: whether it changed, and the time of its next
    occurrence (while paused: the time it would have, which moves on as times pass)."""

    changed: bool
    deliver_at_ms: int


@dataclass
class PauseOp(Op):
    """Pause (`paused`) or resume a SCHEDULED series: the flag in its `extras` entry and a
    PAUSED or RESUMED event in its trace, nothing else (see the module docstring). Asking
    for what it already is changes nothing (`changed` False), like a second Cancel."""

    series_id: str = ""
    paused: bool = True

    def reads(self) -> list[bytes]:
        return [self.series_id.encode()]

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> SeriesPause:
        message_id = self.series_id.encode()
        raw = ctx.store.lookup(batch, message_id)
        if raw is None:
            raise NotFound(f"series_id={self.series_id!r}: no such timer")
        verb = "paused" if self.paused else "resumed"
        if not records.is_series(raw):
            raise FailedPrecondition(
                f"series_id={self.series_id!r}: not a recurring series; only a series "
                f"can be {verb} (cancel or reschedule a one-shot timer)"
            )
        state = records.record_state(raw)
        if state is not State.SCHEDULED:
            raise FailedPrecondition(
                f"series_id={self.series_id!r}: already {state.name}; only a SCHEDULED "
                f"series can be {verb} (send it again with if_exists=REPLACE to start "
                "a cancelled one anew)"
            )
        extras = extras_cf.get_extras(ctx.store, batch, message_id)
        assert extras is not None, f"series {self.series_id!r} has no extras entry"
        options, number, at_ms, paused = extras_cf.decode_series_state(extras)
        if paused is self.paused:
            return SeriesPause(False, records.record_deliver_at_ms(raw))
        next_extras = extras_cf.encode_extras(options, number, at_ms, self.paused)
        extras_cf.stage_extras(batch, message_id, next_extras)
        batch.series_changes.append(SeriesChange(self.series_id, raw, next_extras))
        kind = TraceKind.PAUSED if self.paused else TraceKind.RESUMED
        trace_cf.stage_event(batch, self.series_id, TraceEvent(kind, now_ms))
        batch.operations += 1
        return SeriesPause(True, records.record_deliver_at_ms(raw))
