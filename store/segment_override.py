"""The overrides of a version-2 store (decision 0014, step 4): Cancel, and the move of a
Reschedule or a Nack's delay, one `overrides` entry a message.

- **Cancel** of a SCHEDULED message leaves its pending counter (topic, deliver minute);
  of a FIRED one (a purge, a dead-letter move) leaves its fire chunk, whose `ready` entry
  goes with its last message. The message turns terminal (CANCELLED), and with its
  segment's last, `segstate` and `expiry` are staged (`timerwheel.store.segment_life`).
  Its wheel pair stays: the fire passes it over, and the sweep deletes what is left.
- **Move** of a SCHEDULED message (Reschedule) leaves its old counter; of a FIRED one (a
  Nack with a delay) leaves its fire chunk. It joins the new deliver minute's counter,
  and its new pair goes into the segment's entry of the new slot in the wheel its caller
  chose, merged with what that entry holds. The old pair stays; the join and the fire
  skip it, since the override's deliver time is the message's place. The new deliver
  time must be after the fire cursor's ms (the join's rule: a caller clamps a Reschedule
  to the past to the next tick).

Each tells the firer (`SegmentFirer.overridden`, and `placed` for an upper wheel's
entry). A message is named by its server-made id, or by a client-chosen id through
`ids`. For the one writer thread, which commits every batch it stages.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.segment_fire import SegmentFirer
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_life import _CANCELLED, LiveSegment, LiveSegments
from timerwheel.store.segment_send import SLOT_MS
from timerwheel.store.segments import SegmentView


class SegmentOverrides:
    """Stages Cancels and moves of a version-2 store's messages, over its families by
    name, its firer and the memory of its live segments."""

    def __init__(
        self, families: Mapping[str, Any], firer: SegmentFirer, life: LiveSegments
    ) -> None:
        self._cf, self.firer, self.life = families, firer, life

    def stage_cancel(
        self, batch: StagedBatch, message_id: str, now_ms: int, moved_to: str | None = None
    ) -> State | None:
        """Cancel the message (SCHEDULED or FIRED): the state it had, or None, staging
        nothing, when no such message is live. `moved_to`: the topic a dead-letter move
        copied it to, kept as the override's topic (`timerwheel.store.segment_moves`)."""
        found = self._live(batch, message_id)
        if found is None:
            return None
        seq, index, view, segment = found
        override = self.firer.override(seq, index) or be.Override()
        if segment.chunks[index]:
            was = State.FIRED
            self.life.retire(batch, segment, index)
        else:
            was = State.SCHEDULED
            _count(batch, _topic(view, index, override), _deliver(view, index, override), -1)
        override = override._replace(cancelled_at_ms=now_ms)
        if moved_to is not None:
            override = override._replace(topic=moved_to)
        self._stage(batch, seq, index, override)
        self.life.terminal(batch, seq, segment, index, _CANCELLED, now_ms)
        return was

    def stage_move(
        self, batch: StagedBatch, message_id: str, deliver_ms: int, wheel: str
    ) -> State | None:
        """Move the message (SCHEDULED: a Reschedule; FIRED: a Nack's delay) to `deliver_ms`
        in `wheel`: the state it had, or None, staging nothing, when no such message is
        live. ValueError when `deliver_ms` is not after the fire cursor's ms."""
        slot_ms = SLOT_MS.get(wheel)
        if slot_ms is None:
            raise ValueError(f"wheel {wheel!r} is not one of {sorted(SLOT_MS)}")
        cursor = self.firer.cursor()
        if deliver_ms <= cursor[0]:
            raise ValueError(f"a move to {deliver_ms} is not after the fire cursor {cursor}")
        found = self._live(batch, message_id)
        if found is None:
            return None
        seq, index, view, segment = found
        override = self.firer.override(seq, index) or be.Override()
        topic = _topic(view, index, override)
        if segment.chunks[index]:
            was = State.FIRED
            self.life.retire(batch, segment, index)
        else:
            was = State.SCHEDULED
            _count(batch, topic, _deliver(view, index, override), -1)
        self._stage(batch, seq, index, override._replace(deliver_ms=deliver_ms))
        _count(batch, topic, deliver_ms, +1)
        start = deliver_ms - deliver_ms % slot_ms
        family = keys.CF_WHEEL[wheel]
        key = bk.wheel_entry_key(start, seq)
        staged = batch.writes[family]
        old = staged[key] if key in staged else self._cf[family].get(key)
        pairs = {(deliver_ms, index)}
        if old is not None:
            pairs.update(zip(*be.decode_wheel_entry(old), strict=True))
        ordered = sorted(pairs)
        staged[key] = be.wheel_entry([p[0] for p in ordered], [p[1] for p in ordered])
        self.firer.placed(wheel, start)
        return was

    def _stage(self, batch: StagedBatch, seq: int, index: int, override: be.Override) -> None:
        batch.writes[bk.CF_OVERRIDES][bk.place_key(seq, index)] = be.override_value(override)
        self.firer.overridden(seq, index, override)
        batch.operations += 1

    def _live(
        self, batch: StagedBatch, message_id: str
    ) -> tuple[int, int, SegmentView, LiveSegment] | None:
        """(segment, index, its segment, its memory) of a message that is not terminal."""
        try:
            parsed = parse_id(message_id)
        except ValueError:
            parsed = None
        if parsed is not None:
            seq, index = parsed.segment, parsed.message_index
        else:
            key = bk.ids_key(message_id)
            staged = batch.writes[bk.CF_IDS]
            raw = staged[key] if key in staged else self._cf[bk.CF_IDS].get(key)
            if raw is None:
                return None
            seq, index = be.decode_place(raw)
        key = bk.segment_key(seq)
        staged = batch.writes[bk.CF_SEGMENTS]
        raw = staged[key] if key in staged else self._cf[bk.CF_SEGMENTS].get(key)
        if raw is None:
            return None
        view = SegmentView(raw)
        if (parsed is not None and not view.owns(parsed)) or index >= view.n:
            return None
        segment = self.life.segment(seq, view, batch)
        if segment is None or segment.states[index]:
            return None
        return seq, index, view, segment


def _topic(view: SegmentView, index: int, override: be.Override) -> str:
    return view.topic(index) if override.topic is None else override.topic


def _deliver(view: SegmentView, index: int, override: be.Override) -> int:
    return view.deliver_ms(index) if override.deliver_ms is None else override.deliver_ms


def _count(batch: StagedBatch, topic: str, deliver_ms: int, delta: int) -> None:
    """The pending counter of `topic`'s minute of `deliver_ms` moves by `delta`."""
    bucket = keys.count_bucket_key(topic.encode(), deliver_ms - deliver_ms % keys.COUNT_BUCKET_MS)
    batch.count_deltas[bucket] = batch.count_deltas.get(bucket, 0) + delta
