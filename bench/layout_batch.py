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
index entry. The send, the fire, the Ack and the sweep are the product's
(`timerwheel.store.segment_send`, `segment_fire`, `segment_ack`, over the memory of the
live segments in `segment_life`), and the codecs and keys are the production ones
(`timerwheel.store.segments`, `batch_entries`, `batch_keys`, `segment_ids`): this module
holds only the fired cache, the fetch and the tallies.
"""

from __future__ import annotations

from bisect import bisect_right

from bench.layout_permessage import U64, Counted
from timerwheel.store.batch import StagedBatch
from timerwheel.store.batch_keys import segment_key
from timerwheel.store.batch_store import new_batch
from timerwheel.store.segment_ack import SegmentAcker
from timerwheel.store.segment_fire import SegmentFirer
from timerwheel.store.segment_life import LiveSegments
from timerwheel.store.segment_send import NewSends, SegmentSender
from timerwheel.store.segments import SegmentView


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
        # The product's send, fire, cascade, cursor, Ack and sweep over one memory of the
        # live segments, their reads counted as this layout's own are.
        reads = _CountedReads(self.store)
        self.firer = SegmentFirer(reads)
        self.sender = SegmentSender(self.store.cf, segment_max, rng.randbytes, self.firer.placed)
        self.life = LiveSegments(reads, retention_ms)
        self.acker = SegmentAcker(reads, self.firer, self.life)
        self.sizes: dict[int, int] = {}  # messages a segment not swept: the sweep's tally
        # Segments the fetch read, while live: their ids (the product's, made once for the
        # fetch and the Ack) and bodies.
        self.segments: dict[int, tuple[list[bytes], list[bytes]]] = {}
        self.fired: dict[str, list[tuple[int, list[int], list[int]]]] = {}  # the fired cache

    def send(self, topic: str, bodies: list[bytes], due: list[int], now_ms: int) -> list[bytes]:
        """One group commit through the product's send (`timerwheel.store.segment_send`):
        a segment entry a `segment_max` sends, a wheel entry a (second, segment), a
        counter a minute."""
        n = len(due)
        batch = new_batch()
        sends = NewSends([topic] * n, bodies, due, ["second"] * n)
        made = self.sender.stage(batch, sends, now_ms)
        self.store.commit(_writes(batch))
        for seg, positions in made.segments:
            self.sizes[seg] = len(positions)
        return [message_id.encode() for message_id in made.ids]

    def _segment(self, seg: int) -> tuple[list[bytes], list[bytes]]:
        """A live segment's ids and bodies."""
        found = self.segments.get(seg)
        if found is None:
            view = SegmentView(self.store.cf["segments"][segment_key(seg)])
            self.store.read += 1
            found = self.segments[seg] = (self.life.ids(seg, view), view.bodies(range(view.n)))
        return found

    def fire(self, now_ms: int) -> int:
        """One fire chunk through the product's fire (`SegmentAcker.stage_fire`): its
        `ready` entries, cursor, wheel deletes and counters in one commit; the fired
        cache of its references."""
        batch = new_batch()
        fired = self.acker.stage_fire(batch, now_ms, self.fire_chunk)
        if not any(batch.writes.values()):
            return 0
        self.store.commit(_writes(batch))
        for chunk in fired.chunks:
            self.fired.setdefault(chunk.topic, []).append(
                (chunk.seq, chunk.segments, chunk.indexes)
            )
        return batch.fired

    def fetch(self, topic: str, after_seq: int, limit: int) -> list[tuple[int, bytes, bytes]]:
        """(seq, id, body) after `after_seq`; a message's seq is its chunk's, then its place."""
        out: list[tuple[int, bytes, bytes]] = []
        chunks = self.fired.get(topic, [])
        first = max(0, bisect_right(chunks, after_seq >> 16, key=lambda entry: entry[0]) - 1)
        for chunk, segs, idxs in chunks[first:]:
            base = chunk << 16
            for place in range(max(0, after_seq + 1 - base), len(segs)):
                ids, bodies = self._segment(segs[place])
                i = idxs[place]
                out.append((base + place, ids[i], bodies[i]))
                if len(out) >= limit:
                    return out
        return out

    def ack(self, topic: str, ids: list[bytes], now_ms: int) -> int:
        """One Ack call through the product's (`SegmentAcker.stage_ack`): one `acked`
        entry, a chunk's `ready` delete with its last ack, a segment's `segstate` and
        `expiry` with its last."""
        batch = new_batch()
        acked = self.acker.stage_ack(batch, ids, now_ms)
        if acked.acked:
            self.store.commit(_writes(batch))
        live = self.life.segments
        for seg in [seg for seg in self.segments if seg not in live]:
            del self.segments[seg]  # terminal: no fetch hands it out again
        return acked.acked

    def sweep(self, now_ms: int, chunk: int) -> int:
        """Segments whose expiry has come, at most `chunk`, through the product's sweep."""
        batch = new_batch()
        swept = self.acker.stage_sweep(batch, now_ms, chunk)
        if not swept:
            return 0
        self.store.commit(_writes(batch))
        self.acker.swept(swept)
        return sum(map(self.sizes.pop, swept))

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
