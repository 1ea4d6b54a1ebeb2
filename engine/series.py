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
batch, at most `MAX_CATCH_UP` of them; the rest follow one millisecond later.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from timerwheel.common import State
from timerwheel.store import extras as extras_cf
from timerwheel.store import records
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.domain import SendOptions, When, WhenKind
from timerwheel.wheels.recurrence import finished, next_occurrence_ms

if TYPE_CHECKING:
    from timerwheel.engine.ops import WriterContext

MAX_CATCH_UP = 1_000  # occurrences fired for one series in one batch
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
    options, number, at_ms = extras_cf.decode_series(extras)
    repeat = options.repeat
    assert repeat is not None
    series_id = message_id.decode()
    for fired in range(1, MAX_CATCH_UP + 1):
        _stage_occurrence(ctx, batch, series_id, raw, options, number, at_ms, seq, now_ms)
        number += 1
        at_ms = next_occurrence_ms(repeat, at_ms, now_ms)
        if finished(repeat, number, at_ms):
            retired = records.with_transition(raw, State.ACKED, acked_at_ms=now_ms)
            extras_cf.stage_retire(ctx.store, batch, series_id, retired, now_ms + ctx.retention_ms)
            return
        if at_ms > now_ms or fired == MAX_CATCH_UP:
            break
        seq = ctx.scheduler.take_fire_seqs(1)  # FIRE_EACH: a missed one, due already
    fire_at_ms = max(at_ms, now_ms + 1)
    wheel = ctx.scheduler.placement(fire_at_ms)
    assert wheel is not None
    ctx.store.stage_schedule(
        batch, message_id, records.with_deliver_at(raw, fire_at_ms), fire_at_ms,
        topic.encode(), wheel.name,
    )  # fmt: skip
    extras_cf.stage_extras(batch, message_id, extras_cf.encode_extras(options, number, at_ms))


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
