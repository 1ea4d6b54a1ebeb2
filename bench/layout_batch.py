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
index entry. The send is the product's (`timerwheel.store.segment_send`), and the codecs
and keys are the production ones (`timerwheel.store.segments`, `batch_entries`,
`batch_keys`, `segment_ids`): this module holds only the rest of the bookkeeping.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right

from rocksdict import WriteBatch

from bench.layout_permessage import U64, Counted
from timerwheel.common import State
from timerwheel.store.batch_entries import (
    cursor_value,
    decode_wheel_entry,
    refs_entry,
    segstate_entry,
)
from timerwheel.store.batch_keys import (
    acked_key,
    chunk_key,
    decode_expiry_key,
    decode_wheel_entry_key,
    expiry_key,
    segment_key,
    slot_bound,
)
from timerwheel.store.batch_store import new_batch
from timerwheel.store.keys import count_bucket_key
from timerwheel.store.segment_ids import id_places
from timerwheel.store.segment_send import NewSends, SegmentSender
from timerwheel.store.segments import SegmentView

_ACKED = int(State.ACKED)


class Batch:
    """The batch-level layout of decision 0014, reduced to the burst's operations."""

    FAMILIES = {
        "segments": "messages",
        "wheel_second": "wheel_second",
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
        self.sender = SegmentSender(self.store.cf, segment_max, rng.randbytes)
        self.chunk_seq = self.ack_seq = 0
        self.cursor = (0, 0, -1)  # (deliver ms, segment, index) fired through
        self.wheel: dict[bytes, tuple[array, array]] = {}  # decoded entries of due seconds
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
        writes = {family: staged for family, staged in batch.writes.items() if staged}
        writes["counts"] = {k: U64.pack(v) for k, v in batch.count_deltas.items()}
        self.store.commit(writes)
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
        cursor = self.cursor
        first = slot_bound(cursor[0] - cursor[0] % 1000)
        # Keys only: an entry's value is read and decoded once, when its second comes due.
        keys = self.store.walk_keys("wheel_second", first, slot_bound(now_ms + 1))
        due = []  # (ms, seg, index) through now, after the cursor
        emptied = []
        for key in keys:
            entry = self.wheel.get(key)
            if entry is None:
                entry = self.wheel[key] = decode_wheel_entry(self.store.cf["wheel_second"][key])
            times, indexes = entry
            seg = decode_wheel_entry_key(key)[1]
            start = bisect_right(times, cursor[0] - 1)
            end = bisect_right(times, now_ms)
            due.extend(
                (times[i], seg, indexes[i])
                for i in range(start, end)
                if (times[i], seg, indexes[i]) > cursor
            )
            if end == len(times):
                emptied.append(key)
        if not due:
            return 0
        due.sort()
        due = due[: self.fire_chunk]
        self.cursor = due[-1]
        wheel = {k: None for k in emptied if self.wheel[k][0][-1] <= self.cursor[0]}
        for key in wheel:
            del self.wheel[key]
        self.chunk_seq += 1
        chunk = self.chunk_seq
        segs = [d[1] for d in due]
        idxs = [d[2] for d in due]
        topic = self._segment(due[0][1])[0][0]  # one topic in the burst: a chunk per topic
        ready_key = chunk_key(topic, chunk)
        self.chunk_left[chunk] = [ready_key, len(due)]
        chunk_of = self.chunk_of
        for _, seg, i in due:
            chunk_of[seg][i] = chunk
        self.fired.setdefault(topic, []).append((chunk, segs, idxs))
        meta = {b"cursor": cursor_value(*self.cursor), b"chunk_seq": U64.pack(chunk)}
        ready = {ready_key: refs_entry(now_ms, segs, idxs)}
        minute = count_bucket_key(topic.encode(), now_ms - now_ms % 60_000)
        self.store.commit(
            {"ready": ready, "wheel_second": wheel, "meta": meta, "counts": {minute: U64.pack(0)}}
        )
        return len(due)

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
