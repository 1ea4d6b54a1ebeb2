"""Recently fired records, kept in memory so delivery need not read them back from RocksDB.

The writer adds each committed batch's fired records here; `Engine.fetch_fired` serves a
topic from this cache when the cache is known to be complete above the reader's cursor,
and falls back to the `ready` column family otherwise (after a restart, or once entries
were evicted). RocksDB stays the truth: the cache only saves the read-back.

Completeness per topic: `floor` is the highest fire sequence *not* guaranteed to be in
the cache (at start, the sequence the engine opened with; later, the last evicted one).
A read after `after_seq >= floor` sees every fired entry of the topic above `after_seq`.

Bounds: a reader's fetch after `after_seq` means it holds everything up to there, so
those entries are dropped (and the floor rises to `after_seq`, so a later read from an
earlier cursor goes to RocksDB); and when the cache as a whole exceeds `max_entries` or
`max_bytes` (a topic nobody reads), the largest topic by bytes is dropped and falls back to
reads from RocksDB. Bytes, not only entries: 200 fired 3 MiB bodies are 600 MiB. An entry
is charged its record and id plus ENTRY_OVERHEAD_BYTES for the tuple and deque slot.

Entries are the records as fired; an entry acked before anyone fetched it (possible only
for a client that acks an id it learned elsewhere) may still be handed out once more,
which at-least-once delivery allows and a repeated ack ignores.
"""

from __future__ import annotations

import threading
from collections import deque

from store import records
from wheels.domain import FiredTimer

FiredEntry = tuple[int, bytes, bytes]  # (fire seq, message id, record as committed)
ENTRY_OVERHEAD_BYTES = 168  # sys.getsizeof: tuple 64, int 28, two empty bytes 66, a deque slot 8


def entry_bytes(entry: FiredEntry) -> int:
    return len(entry[1]) + len(entry[2]) + ENTRY_OVERHEAD_BYTES


class FiredCache:
    def __init__(self, start_seq: int, max_entries: int, max_bytes: int) -> None:
        self._start_seq = start_seq
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._topics: dict[str, deque[FiredEntry]] = {}
        self._topic_bytes: dict[str, int] = {}
        self._floors: dict[str, int] = {}
        self._size = 0
        self._bytes = 0
        self._lock = threading.Lock()

    def add(self, fired: dict[str, list[FiredEntry]]) -> None:
        """Entries of one committed batch, per topic, in fire order."""
        with self._lock:
            for topic, entries in fired.items():
                self._topics.setdefault(topic, deque()).extend(entries)
                added = sum(map(entry_bytes, entries))
                self._topic_bytes[topic] = self._topic_bytes.get(topic, 0) + added
                self._size += len(entries)
                self._bytes += added
            while self._size > self._max_entries or self._bytes > self._max_bytes:
                self._drop_largest()

    @property
    def bytes(self) -> int:
        """What the cached entries are charged (records, ids, overhead)."""
        with self._lock:
            return self._bytes

    def read(self, topic: str, after_seq: int, limit: int) -> list[FiredTimer] | None:
        """Fired entries above `after_seq`, or None when the cache cannot answer."""
        picked = self.read_raw(topic, after_seq, limit)
        if picked is None:
            return None
        return [
            FiredTimer(seq, records.decode_timer(mid.decode(), raw)) for seq, mid, raw in picked
        ]

    def read_raw(self, topic: str, after_seq: int, limit: int) -> list[FiredEntry] | None:
        """`read`, undecoded: (fire seq, message id, record) entries."""
        with self._lock:
            if after_seq < self._floors.get(topic, self._start_seq):
                return None
            entries = self._topics.get(topic)
            if not entries:
                return []
            while entries and entries[0][0] <= after_seq:  # the reader holds these
                dropped = entry_bytes(entries.popleft())
                self._topic_bytes[topic] -= dropped
                self._bytes -= dropped
                self._size -= 1
            # What was dropped is no longer here: an earlier cursor must go to RocksDB.
            self._floors[topic] = max(after_seq, self._floors.get(topic, self._start_seq))
            return [entries[i] for i in range(min(limit, len(entries)))]

    def _drop_largest(self) -> None:
        topic = max(self._topic_bytes, key=self._topic_bytes.__getitem__)
        entries = self._topics.pop(topic)
        self._bytes -= self._topic_bytes.pop(topic)
        self._size -= len(entries)
        if entries:
            self._floors[topic] = entries[-1][0]
