"""The rare operations of a version-2 store that version 1 does by rewriting records
(decision 0014, step 5): REPLACE's old copy, the dead-letter move, and bulk cancel and
purge, each through `overrides` (`timerwheel.store.segment_override`) and, for a copy, a
send (`timerwheel.store.segment_send`).

- **REPLACE** (`stage_replace`), staged before the send of the new message in the same
  group commit: the old copy a client id names gets a CANCELLED override when it is
  SCHEDULED (its pending counter goes), and nothing when it is CANCELLED already. The
  send then puts the client id's `ids` entry to the new message. As in version 1
  (`timerwheel.engine.send_op`), a FIRED or ACKED old copy was, or is being, delivered,
  so a REPLACE of it is refused (`FailedPrecondition`) and nothing is staged.
- **Dead-letter move** (`stage_dead_letters`): each FIRED message is copied into the
  current segment under its dead-letter topic, due now (the next fire takes it), with
  version 1's `timerwheel.dead_letter.*` properties: the origin topic in them is the link
  a redrive follows, kept in the segment's sparse part. Send options are dropped, as
  version 1 drops them. The old copy leaves its fire chunk through one override, cancelled
  at the move with the dead-letter topic as its topic. The copy gets a new server-made id
  (an id names its segment and index), and the old id is kept in the copy's properties
  (`timerwheel.dead_letter.message_id`); a client-chosen id moves to the copy with its
  `ids` entry. One call's moves go into one segment.
- **Bulk cancel and purge** (`stage_bulk_cancel`): the ids a page selected
  (`timerwheel.store.segment_bulk`) are checked again against the filter and their
  state as the batch leaves them, then each SCHEDULED one (and with `purge` each FIRED
  one) gets a CANCELLED override, one a message, as version 1's `BulkCancelOp`.

`look` is the state of one message as a batch leaves it, without entering the writers'
memory. For the one writer thread, which commits every batch it stages.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch import StagedBatch
from timerwheel.store.segment_ids import format_id, parse_id
from timerwheel.store.segment_override import SegmentOverrides
from timerwheel.store.segment_send import NewSends, SegmentSender
from timerwheel.store.segments import Extras, SegmentView
from timerwheel.wheels.bulk import DEAD_LETTER_ORIGIN, DEAD_LETTER_PREFIX, TimerFilter
from timerwheel.wheels.domain import FailedPrecondition

DEAD_LETTER_MESSAGE_ID = DEAD_LETTER_PREFIX + "message_id"  # the old copy's id
_REPLACEABLE = (State.SCHEDULED, State.CANCELLED)  # version 1's: never delivered twice


class Look(NamedTuple):
    """One message as a batch leaves it (the join's rule, from the writers' memory)."""

    segment: int
    message_index: int
    state: State
    topic: str
    deliver_ms: int
    view: SegmentView


class DeadLetter(NamedTuple):
    """A FIRED message of `topic` that ran out of attempts, to move to `target`."""

    topic: str
    message_id: str
    target: str
    attempts: int
    reason: str


class BulkCancelled(NamedTuple):
    cancelled: list[str]  # the SCHEDULED ones
    purged: dict[str, list[str]]  # topic: the FIRED ones a purge retired


class SegmentMoves:
    """REPLACE, dead-letter moves and bulk cancel of a version-2 store, over its families
    by name, its overrides and its sender."""

    def __init__(
        self, families: Mapping[str, Any], overrides: SegmentOverrides, sender: SegmentSender
    ) -> None:
        self._cf, self.overrides, self.sender = families, overrides, sender

    def look(self, batch: StagedBatch, message_id: str) -> Look | None:
        """The message a server-made or client-chosen id names, as `batch` leaves it;
        None when there is none (unknown, forged, swept)."""
        try:
            parsed = parse_id(message_id)
        except ValueError:
            parsed = None
        place = None if parsed is None else (parsed.segment, parsed.message_index)
        if place is None:
            raw = self._staged_or(batch, bk.CF_IDS, bk.ids_key(message_id))
            if raw is None:
                return None
            place = be.decode_place(raw)
        seq, index = place
        raw = self._staged_or(batch, bk.CF_SEGMENTS, bk.segment_key(seq))
        if raw is None:
            return None
        view = SegmentView(raw)
        if (parsed is not None and not view.owns(parsed)) or index >= view.n:
            return None
        override = self.overrides.firer.override(seq, index) or be.Override()
        topic = view.topic(index) if override.topic is None else override.topic
        deliver_ms = view.deliver_ms(index) if override.deliver_ms is None else override.deliver_ms
        terminal = self._staged_or(batch, bk.CF_SEGSTATE, bk.segment_key(seq))
        if terminal is not None:
            state = State(be.segstate_of(terminal, index)[0])
        else:
            live = self.overrides.life.segments.get(seq)
            if live is not None and live.states[index]:
                state = State(live.states[index])
            elif live is not None and live.chunks[index]:
                state = State.FIRED
            else:  # a segment enters memory at its first fire: none of it fired yet
                state = State.SCHEDULED
        return Look(seq, index, state, topic, deliver_ms, view)

    def stage_replace(self, batch: StagedBatch, client_id: str, now_ms: int) -> State | None:
        """The old copy of a REPLACE, staged before the new message's send: the state it
        had (SCHEDULED: now CANCELLED; CANCELLED: left so), or None when the id names no
        message. FailedPrecondition, staging nothing, when it is FIRED or ACKED."""
        raw = self._staged_or(batch, bk.CF_IDS, bk.ids_key(client_id))
        if raw is None:
            return None
        seq, index = be.decode_place(raw)
        found = self._look_place(batch, seq, index)
        if found is None:
            return None  # its segment is swept: the id is free
        if found.state not in _REPLACEABLE:
            raise FailedPrecondition(
                f"message_id={client_id!r}: already {found.state.name}; "
                "only a SCHEDULED or CANCELLED timer can be replaced"
            )
        if found.state is State.SCHEDULED:
            self.overrides.stage_cancel(batch, found_id(found), now_ms)
        return found.state

    def stage_dead_letters(
        self, batch: StagedBatch, moves: Sequence[DeadLetter], now_ms: int
    ) -> list[str | None]:
        """Move each FIRED message to its dead-letter topic: by position, the copy's id,
        or None when the message is no longer FIRED on its `topic` (acked or moved
        meanwhile). A message named twice moves once."""
        out: list[str | None] = [None] * len(moves)
        taken: dict[tuple[int, int], int] = {}
        for position, move in enumerate(moves):
            found = self.look(batch, move.message_id)
            if found is None or found.state is not State.FIRED or found.topic != move.topic:
                continue
            taken.setdefault((found.segment, found.message_index), position)
        if not taken:
            return out
        positions, topics, bodies, extras = [], [], [], {}
        cursor_ms = self.overrides.firer.cursor()[0]
        for (seq, index), position in taken.items():
            move = moves[position]
            found = self._look_place(batch, seq, index)
            assert found is not None
            old = found.view.extras(index) or Extras()
            properties = {
                **old.properties,
                DEAD_LETTER_ORIGIN: move.topic,
                DEAD_LETTER_PREFIX + "attempts": str(move.attempts),
                DEAD_LETTER_PREFIX + "reason": move.reason,
                DEAD_LETTER_PREFIX + "at_ms": str(now_ms),
                DEAD_LETTER_MESSAGE_ID: move.message_id,
            }
            extras[len(positions)] = Extras(client_id=old.client_id, properties=properties)
            positions.append(position)
            topics.append(move.target)
            bodies.append(found.view.body(index))
            self.overrides.stage_cancel(batch, found_id(found), now_ms, moved_to=move.target)
        due_ms = max(now_ms, cursor_ms)
        n = len(positions)
        sends = NewSends(topics, bodies, [due_ms] * n, ["second"] * n, extras=extras)
        staged = self.sender.stage(batch, sends, now_ms)
        for made, position in zip(staged.ids, positions, strict=True):
            out[position] = made
        return out

    def stage_bulk_cancel(
        self, batch: StagedBatch, message_ids: Sequence[str], selected: TimerFilter,
        purge: bool, now_ms: int,
    ) -> BulkCancelled:  # fmt: skip
        """Cancel the SCHEDULED messages among `message_ids` that `selected` still
        matches; with `purge`, also retire the FIRED ones. Others are left alone."""
        out = BulkCancelled([], {})
        for message_id in dict.fromkeys(message_ids):
            found = self.look(batch, message_id)
            if found is None or not selected.matches(message_id, found.topic, found.deliver_ms):
                continue
            if found.state is State.SCHEDULED:
                self.overrides.stage_cancel(batch, found_id(found), now_ms)
                out.cancelled.append(message_id)
            elif found.state is State.FIRED and purge:
                self.overrides.stage_cancel(batch, found_id(found), now_ms)
                out.purged.setdefault(found.topic, []).append(message_id)
        return out

    def _look_place(self, batch: StagedBatch, seq: int, index: int) -> Look | None:
        raw = self._staged_or(batch, bk.CF_SEGMENTS, bk.segment_key(seq))
        if raw is None:
            return None
        view = SegmentView(raw)
        if index >= view.n:
            raise ValueError(f"`ids` names index {index} of segment {seq} of {view.n}")
        return self.look(batch, format_id(view.deliver_ms(index), seq, index, view.random(index)))

    def _staged_or(self, batch: StagedBatch, family: str, key: bytes) -> bytes | None:
        staged = batch.writes[family]
        return staged[key] if key in staged else self._cf[family].get(key)


def found_id(found: Look) -> str:
    """The message's server-made id: what names it whatever its client id says now."""
    view, index = found.view, found.message_index
    return format_id(view.deliver_ms(index), found.segment, index, view.random(index))
