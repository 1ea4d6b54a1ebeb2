"""What the writers of a version-2 store keep in memory of its live segments (decision
0014, step 4): for each message of a segment that has fired or been overridden, its
terminal state byte and time and its fire chunk; for each live fire chunk, its `ready`
key and how many of its messages are not retired; for each live Ack entry, how many of
the segments it names are not terminal.

A segment enters memory at its first fire or override, so a far-future backlog costs
nothing, and leaves it when its last message turns terminal. That is when its `segstate`
(each message's state and time) and `expiry` entries are staged, and the Ack entries
that named only terminal segments are deleted. A fire chunk's `ready` entry is deleted
with the last of its messages to be retired (acked, cancelled, or moved by a Nack's
delay).

Opening rebuilds the memory from what is on disk: the live `ready` entries (a message's
chunk is the newest naming it, while it is fired and not terminal), the `acked` entries
(the earliest names the Ack time) and the cancelling `overrides`, the fire cursor, and
the `segstate` of each segment they name (a terminal segment is not live).

For the one writer thread, which commits every batch it stages: memory moves at staging,
as the firer's does (`timerwheel.store.segment_fire`).
"""

from __future__ import annotations

from array import array
from collections.abc import Mapping
from typing import Any

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch import StagedBatch
from timerwheel.store.segment_fire import FireChunk
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import TimerReads

_ACKED, _CANCELLED = int(State.ACKED), int(State.CANCELLED)


class LiveSegment:
    """One live segment's messages: a terminal state byte (0: not terminal), its time,
    the fire chunk seq holding the message (0: none), and the segment's ids once an Ack
    or a fetch asked for them."""

    __slots__ = ("acks", "chunks", "ids", "left", "states", "times")

    def __init__(self, n: int) -> None:
        self.states = bytearray(n)
        self.times = array("q", bytes(8 * n))
        self.chunks = array("Q", bytes(8 * n))
        self.left = n  # messages not terminal
        self.acks: set[int] = set()  # the live Ack entries naming it
        self.ids: list[bytes] | None = None


class LiveSegments:
    """The live segments, fire chunks and Ack entries of a version-2 store, over its
    families by name; rebuilt from disk at construction."""

    def __init__(self, families: Mapping[str, Any], retention_ms: int) -> None:
        if retention_ms < 0:
            raise ValueError(f"retention_ms must be at least 0, not {retention_ms}")
        self._cf, self.retention_ms = families, retention_ms
        self.segments: dict[int, LiveSegment] = {}
        self.chunks: dict[int, list] = {}  # chunk seq: [its `ready` key, messages not retired]
        self.acks: dict[int, int] = {}  # Ack seq: segments it names that are not terminal
        # The last Ack call's seq. Only the order of the live entries matters (the join
        # takes the earliest naming a message), so open starts after the last live one
        # and an Ack call writes nothing to `meta`.
        self.ack_seq = 0
        self._rebuild()

    def segment(
        self, seq: int, view: SegmentView | None = None, batch: StagedBatch | None = None
    ) -> LiveSegment | None:
        """The live segment `seq`, entering memory now if it is neither terminal nor swept
        (None then), as `batch` leaves it if given: an Ack earlier in the same group
        commit may have closed it. `view` spares the read of a segment the caller holds."""
        found = self.segments.get(seq)
        if found is not None:
            return found
        key = bk.segment_key(seq)
        if view is None:
            raw = self._cf[bk.CF_SEGMENTS].get(key)
            if raw is None:
                return None
            view = SegmentView(raw)
        staged = {} if batch is None else batch.writes[bk.CF_SEGSTATE]
        terminal = staged[key] if key in staged else self._cf[bk.CF_SEGSTATE].get(key)
        if terminal is not None:
            return None
        found = self.segments[seq] = LiveSegment(view.n)
        return found

    def ids(
        self, seq: int, view: SegmentView | None = None, batch: StagedBatch | None = None
    ) -> list[bytes] | None:
        """A live segment's ids (ASCII) by index, made once while it is live: what an Ack
        compares its ids with and a fetch hands out (`view` spares the read of a segment
        the caller holds; `batch`, when given, may hold it). None when it is not live."""
        found = self.segments.get(seq)
        if found is None:
            return None
        if found.ids is None:
            if view is None:
                view = SegmentView(self._segment_value(seq, batch))
            found.ids = view.message_ids(seq)
        return found.ids

    def fired(self, batch: StagedBatch, chunks: list[FireChunk]) -> None:
        """A fire staged these chunks into `batch`: each message is in its chunk until
        retired."""
        live, get = self.chunks, self.segments.get
        for chunk in chunks:
            seq = chunk.seq
            live[seq] = [chunk.key, len(chunk.segments)]
            last, segment = -1, None
            for seg, index in zip(chunk.segments, chunk.indexes, strict=True):
                if seg != last:
                    last, segment = seg, get(seg) or self._first_fire(seg, batch)
                segment.chunks[index] = seq

    def _first_fire(self, seq: int, batch: StagedBatch) -> LiveSegment:
        """A segment enters memory at its first fire: one that fires is not terminal."""
        found = self.segments[seq] = LiveSegment(SegmentView(self._segment_value(seq, batch)).n)
        return found

    def _segment_value(self, seq: int, batch: StagedBatch | None) -> bytes:
        """A segment's value, as `batch` (a send in it) leaves it if given."""
        key = bk.segment_key(seq)
        if batch is not None:
            staged = batch.writes[bk.CF_SEGMENTS].get(key)
            if staged is not None:
                return staged
        return self._cf[bk.CF_SEGMENTS][key]

    def retire(self, batch: StagedBatch, segment: LiveSegment, index: int) -> None:
        """The message leaves its fire chunk; the chunk's `ready` entry goes with its last."""
        seq = segment.chunks[index]
        segment.chunks[index] = 0
        chunk = self.chunks[seq]
        chunk[1] -= 1
        if not chunk[1]:
            batch.writes[bk.CF_READY][chunk[0]] = None
            del self.chunks[seq]

    def terminal(
        self, batch: StagedBatch, seq: int, segment: LiveSegment, index: int, state: int,
        now_ms: int,
    ) -> None:  # fmt: skip
        """The message turns terminal (ACKED or CANCELLED); with its segment's last,
        `segstate` and `expiry` are staged and the segment leaves memory."""
        segment.states[index], segment.times[index] = state, now_ms
        segment.left -= 1
        if not segment.left:
            self.close(batch, seq, segment, now_ms)

    def close(self, batch: StagedBatch, seq: int, segment: LiveSegment, now_ms: int) -> None:
        """Every message of the segment is terminal: its `segstate` and `expiry`, and the
        Ack entries that name only terminal segments deleted."""
        writes = batch.writes
        writes[bk.CF_SEGSTATE][bk.segment_key(seq)] = be.segstate_entry(
            segment.states, segment.times
        )
        writes[bk.CF_EXPIRY][bk.expiry_key(now_ms + self.retention_ms, seq)] = b""
        acks = self.acks
        for ack in segment.acks:
            acks[ack] -= 1
            if not acks[ack]:
                writes[bk.CF_ACKED][bk.acked_key(ack)] = None
                del acks[ack]
        del self.segments[seq]

    def _rebuild(self) -> None:
        """The memory from the live `ready`, `acked` and `overrides` entries."""
        cf = self._cf
        raw = cf[bk.CF_META].get(bk.META_FIRE_CURSOR)
        cursor = (-1, 0, 0) if raw is None else be.decode_cursor(raw)
        chunk_of: dict[tuple[int, int], int] = {}
        ready_keys: dict[int, bytes] = {}
        for key, value in sorted(_items(cf[bk.CF_READY]), key=lambda kv: bk.chunk_seq(kv[0])):
            seq, refs = bk.chunk_seq(key), be.decode_refs(value)
            ready_keys[seq] = key
            chunk_of.update(dict.fromkeys(zip(refs.segments, refs.indexes, strict=True), seq))
        terminal: dict[tuple[int, int], tuple[int, int]] = {}
        named: dict[int, set[int]] = {}  # Ack seq: the segments it names
        for key, value in _items(cf[bk.CF_ACKED]):
            ack, refs = bk.segment_seq(key), be.decode_refs(value)
            named[ack] = set(refs.segments)
            self.ack_seq = max(self.ack_seq, ack)
            for place in zip(refs.segments, refs.indexes, strict=True):
                terminal.setdefault(place, (_ACKED, refs.time_ms))
        moved: dict[tuple[int, int], int] = {}
        for key, value in _items(cf[bk.CF_OVERRIDES]):
            place, override = bk.decode_place_key(key), be.decode_override(value)
            if override.cancelled_at_ms is not None:
                terminal[place] = (_CANCELLED, override.cancelled_at_ms)
            elif override.deliver_ms is not None:
                moved[place] = override.deliver_ms
        seqs = {seg for seg, _ in chunk_of} | {seg for seg, _ in terminal}
        for seq in sorted(seqs):
            self.segment(seq)
        for (seq, index), (state, at_ms) in terminal.items():
            segment = self.segments.get(seq)
            if segment is not None:
                segment.states[index], segment.times[index] = state, at_ms
                segment.left -= 1
        for (seq, index), chunk in chunk_of.items():
            segment = self.segments.get(seq)
            deliver_ms = moved.get((seq, index))
            if deliver_ms is not None and (deliver_ms, seq, index) > cursor:
                continue  # a Nack's delay or a Reschedule made it SCHEDULED again
            if segment is None or segment.states[index]:
                continue
            segment.chunks[index] = chunk
            self.chunks.setdefault(chunk, [ready_keys[chunk], 0])[1] += 1
        for ack, segs in named.items():
            live = sum(seq in self.segments for seq in segs)
            if live:
                self.acks[ack] = live
                for seq in segs & self.segments.keys():
                    self.segments[seq].acks.add(ack)


def _items(family: Any) -> list[tuple[bytes, bytes]]:
    return list(TimerReads._range(family, b"", None))
