"""The batch-level layout of decision 0014, reduced to what the burst executes (see
`bench.layout_permessage` for what the prototype leaves out).

`Batch` keeps a group commit's sends in `segments` entries of at most `segment_max`
(columns: ids, deliver times, topic indexes, body lengths, bodies), the wheel as one entry
a (second, segment) holding the segment's (deliver ms, index) pairs, one `ready` entry a
fire chunk (its (segment, index) references; deleted with the chunk's last ack), one
`acked` entry an Ack call (the pairs it retired), and, once all of a segment's messages
are terminal, a `segstate` entry (each message's state and ack time) and an `expiry`
entry; the Ack entries of terminal segments go then. The sweep deletes the segment and
its `segstate`. A message is fired when its (deliver ms, segment, index) is at or before
the fire cursor. A server-made id is the deliver time, the segment, the index and 80
random bits: an Ack or a Get finds the segment from the id alone, with no per-message
index entry. The send and the fire are the product's (`timerwheel.store.segment_send`,
`segment_fire`), and the codecs and keys are the production ones
(`timerwheel.store.segments`, `batch_entries`, `batch_keys`, `segment_ids`): this module
holds only the rest of the bookkeeping.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from rocksdict import WriteBatch

from bench.layout_permessage import U64, Counted
from timerwheel.common import State
from timerwheel.store.batch import StagedBatch
from timerwheel.store.batch_entries import refs_entry, segstate_entry
from timerwheel.store.batch_keys import (
    acked_key,
    decode_expiry_key,
    expiry_key,
    segment_key,
    slot_bound,
)
from timerwheel.store.batch_store import new_batch
from timerwheel.store.segment_fire import SegmentFirer
from timerwheel.store.segment_ids import id_places
from timerwheel.store.segment_send import NewSends, SegmentSender
from timerwheel.store.segments import SegmentView

_ACKED = int(State.ACKED)


class Batch:
    """The batch-level layout of decision 0014, reduced to the burst's operations."""

    FAMILIES = {
        "segments": "messages",
        "wheel_second": "wheel_second",
        "wheel_minute": "wheel_minute",
        "wheel_hour": "wheel_hour",
        "overrides": "expiry",
        "ready": "ready",
        "acked": "expiry",
        "segstate": "expiry",
        "expiry": "expiry",
        "counts": "counts",
        "meta": "meta",
    }

    def __init__(
        self, path: str, rng, retention_ms: int, fire_chunk: int, sync=True, segment_max: int = 1024
    ) -> None:
        self.store = Counted(path, self.FAMILIES, sync)
        self.rng, self.retention_ms, self.fire_chunk = rng, retention_ms, fire_chunk
        # Sends a segment at most (what a Get by id reads); the product's send makes them.
        # The product's fire, cascade and cursor, its reads counted as this layout's are.
        self.firer = SegmentFirer(_CountedReads(self.store))
        self.sender = SegmentSender(self.store.cf, segment_max, rng.randbytes, self.firer.placed)
        self.ack_seq = 0
        # Segments the fire or an Ack touched, read in place: their topic table, and their
        # ids and bodies each made once (the burst hands out and acks every message).
        self.segments: dict[int, tuple[tuple[str, ...], list[bytes], list[bytes]]] = {}
        # A live segment's state in memory (rebuilt at open from the live `ready` and
        # `acked` entries and the fire cursor): messages not terminal; a message's state
        # byte (1: acked), its fire chunk and its Ack call: 9 bytes a message.
        self.left: dict[int, int] = {}
        self.sizes: dict[int, int] = {}
        self.acked: dict[int, bytearray] = {}  # a segment's state bytes (0: not terminal)
        self.chunk_of: dict[int, array] = {}
        self.ack_of: dict[int, array] = {}
        self.chunk_left: dict[int, list] = {}  # a live fire chunk: [its ready key, un-acked]
        self.ack_open: dict[int, list[int]] = {}  # a live Ack entry: [acked at, live segments]
        self.seg_acks: dict[int, set[int]] = {}  # a live segment's Ack entries
        self.fired: dict[str, list[tuple[int, list[int], list[int]]]] = {}  # the fired cache

    def send(self, topic: str, bodies: list[bytes], due: list[int], now_ms: int) -> list[bytes]:
        """One group commit through the product's send (`timerwheel.store.segment_send`):
        a segment entry a `segment_max` sends, a wheel entry a (second, segment), a
        counter a minute; then this layout's memory of the new segments."""
        n = len(due)
        batch = new_batch()
        sends = NewSends([topic] * n, bodies, due, ["second"] * n)
        made = self.sender.stage(batch, sends, now_ms)
        self.store.commit(_writes(batch))
        for seg, positions in made.segments:
            n = self.left[seg] = self.sizes[seg] = len(positions)
            self.acked[seg] = bytearray(n)
            self.chunk_of[seg] = array("I", bytes(4 * n))
            self.ack_of[seg] = array("I", bytes(4 * n))
            self.seg_acks[seg] = set()
        return [message_id.encode() for message_id in made.ids]

    def _segment(self, seg: int) -> tuple[tuple[str, ...], list[bytes], list[bytes]]:
        """A segment's topics, ids and bodies."""
        found = self.segments.get(seg)
        if found is None:
            view = SegmentView(self.store.cf["segments"][segment_key(seg)])
            self.store.read += 1
            found = self.segments[seg] = (
                view.topics,
                view.message_ids(seg),
                view.bodies(range(view.n)),
            )
        return found

    def fire(self, now_ms: int) -> int:
        """One fire chunk through the product's fire: its `ready` entries, cursor, wheel
        deletes and counters in one commit; then this layout's memory of the chunks."""
        batch = new_batch()
        fired = self.firer.stage(batch, now_ms, self.fire_chunk)
        if not any(batch.writes.values()):
            return 0
        self.store.commit(_writes(batch))
        chunk_left, chunk_of = self.chunk_left, self.chunk_of
        for chunk in fired.chunks:
            segs, idxs = chunk.segments, chunk.indexes
            chunk_left[chunk.seq] = [chunk.key, len(segs)]
            for seg, i in zip(segs, idxs, strict=True):
                chunk_of[seg][i] = chunk.seq
            self.fired.setdefault(chunk.topic, []).append((chunk.seq, segs, idxs))
        return batch.fired

    def fetch(self, topic: str, after_seq: int, limit: int) -> list[tuple[int, bytes, bytes]]:
        """(seq, id, body) after `after_seq`; a message's seq is its chunk's, then its place."""
        out: list[tuple[int, bytes, bytes]] = []
        chunks = self.fired.get(topic, [])
        first = max(0, bisect_right(chunks, after_seq >> 16, key=lambda entry: entry[0]) - 1)
        for chunk, segs, idxs in chunks[first:]:
            base = chunk << 16
            for place in range(max(0, after_seq + 1 - base), len(segs)):
                _, ids, bodies = self._segment(segs[place])
                i = idxs[place]
                out.append((base + place, ids[i], bodies[i]))
                if len(out) >= limit:
                    return out
        return out

    def ack(self, topic: str, ids: list[bytes], now_ms: int) -> int:
        """One `acked` entry an Ack call: the (segment, index) pairs it retired."""
        self.ack_seq += 1
        seq = self.ack_seq
        staged: dict[str, dict[bytes, bytes | None]] = {
            "acked": {},
            "expiry": {},
            "ready": {},
            "segstate": {},
        }
        segs: list[int] = []
        idxs: list[int] = []
        chunk_left, done = self.chunk_left, []
        for mid, seg, i in zip(ids, *id_places(ids), strict=True):
            acked = self.acked.get(seg)
            if acked is None or i >= len(acked) or acked[i] or self._segment(seg)[1][i] != mid:
                continue  # unknown, acked already, or not this segment's id
            acked[i] = _ACKED
            self.ack_of[seg][i] = seq
            segs.append(seg)
            idxs.append(i)
            chunk = chunk_left[self.chunk_of[seg][i]]
            chunk[1] -= 1
            if not chunk[1]:  # the fire chunk's `ready` entry goes with its last ack
                staged["ready"][chunk[0]] = None
                del chunk_left[self.chunk_of[seg][i]]
            self.left[seg] -= 1
            self.seg_acks[seg].add(seq)
            if not self.left[seg]:
                done.append(seg)
        if segs:
            staged["acked"][acked_key(seq)] = refs_entry(now_ms, segs, idxs)
            self.ack_open[seq] = [now_ms, len(set(segs))]
        for seg in done:  # all terminal: its states in one entry, its Ack entries may go
            acked_at = self.ack_open
            times = [acked_at[a][0] for a in self.ack_of.pop(seg)]
            staged["segstate"][segment_key(seg)] = segstate_entry(self.acked.pop(seg), times)
            staged["expiry"][expiry_key(now_ms + self.retention_ms, seg)] = b""
            for a in self.seg_acks.pop(seg):
                acked_at[a][1] -= 1
                if not acked_at[a][1]:
                    staged["acked"][acked_key(a)] = None
                    del acked_at[a]
            del self.segments[seg], self.chunk_of[seg]
        self.store.commit(staged)
        return len(segs)

    def sweep(self, now_ms: int, chunk: int) -> int:
        due = self.store.walk("expiry", b"", slot_bound(now_ms + 1), chunk)
        batch = WriteBatch(raw_mode=True)
        swept = 0
        for key, _ in due:
            seq = decode_expiry_key(key)[1]
            batch.delete(segment_key(seq), self.store.handles["segments"])
            batch.delete(segment_key(seq), self.store.handles["segstate"])
            batch.delete(key, self.store.handles["expiry"])
            swept += self.sizes.pop(seq)
            del self.left[seq]
        self.store.written += 3 * len(due)
        self.store.db.write(batch)
        if self.store.sync:
            self.store.db.flush_wal(True)
        return swept

    def close(self) -> None:
        self.store.close()


def _writes(batch: StagedBatch) -> dict[str, dict[bytes, bytes | None]]:
    """A batch's writes for `Counted.commit`. The counters are this prototype's stand-in
    for `PendingCounts`: one put a minute the batch changes (what the product writes),
    its delta's size as the value, since no totals are kept here."""
    writes = {family: staged for family, staged in batch.writes.items() if staged}
    deltas = batch.count_deltas
    if deltas:
        writes["counts"] = dict(zip(deltas, map(U64.pack, map(abs, deltas.values())), strict=True))
    return writes


class _CountedReads:
    """The store's families as the product's fire reads them, each entry read counted in
    `Counted.read`, as `Counted.walk` counts the reads of this layout's own code."""

    def __init__(self, store: Counted) -> None:
        self._families = {name: _CountedFamily(store, cf) for name, cf in store.cf.items()}

    def __getitem__(self, name: str) -> _CountedFamily:
        return self._families[name]


class _CountedFamily:
    def __init__(self, store: Counted, cf) -> None:
        self._store, self._cf = store, cf

    def get(self, key: bytes) -> bytes | None:
        self._store.read += 1
        return self._cf.get(key)

    def __getitem__(self, key: bytes) -> bytes:
        self._store.read += 1
        return self._cf[key]

    def keys(self, from_key: bytes, read_opt) -> list[bytes]:
        found = list(self._cf.keys(from_key=from_key, read_opt=read_opt))
        self._store.read += len(found)
        return found

    def items(self, from_key: bytes, read_opt):
        for item in self._cf.items(from_key=from_key, read_opt=read_opt):
            self._store.read += 1
            yield item
