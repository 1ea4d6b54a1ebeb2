"""Recently fired records, kept in memory so delivery need not read them back from RocksDB.

The writer adds each committed batch's fired records here; `Engine.fetch_fired_raw` serves a
topic from this cache when the cache is known to be complete above the reader's cursor,
and falls back to the `ready` column family otherwise (after a restart, or once entries
were evicted). RocksDB stays the truth: the cache only saves the read-back.

Completeness per topic: `floor` is the highest fire sequence *not* guaranteed to be in
the cache (at start, the sequence the engine opened with; later, the last evicted one).
A read after `after_seq >= floor` sees every fired entry of the topic above `after_seq`.

Bounds: a reader's fetch after `after_seq` means it holds everything up to there, so
those entries are dropped (and the floor rises to `after_seq`, so a later read from an
earlier cursor goes to RocksDB); and when the cache as a whole exceeds `max_bytes` (a topic
nobody reads, a burst delivery cannot keep up with), the largest topic by bytes is dropped
and falls back to reads from RocksDB. Bytes, not entries: 200 fired 3 MiB bodies are 600
MiB, and a million 32 B ones about 280 MiB, since an entry is charged its record and id
plus ENTRY_OVERHEAD_BYTES for the tuple and deque slot. (A cap on entries beside the
bytes would make a large `fired_cache_bytes` useless for small bodies: the entry cap would
be reached long before the bytes; docs/lab-log.md has what a larger cache buys.)

Retired entries: an entry acked (or moved to its dead-letter topic) is no longer in the
`ready` column family, so the cache must not hand it out either. A reader's cursor does
not prove it: a dispatcher freed when idle, or a delivery process that restarted, reads
again from 0, and would get every cached message it had already acked. The writer tells
the cache which fire sequences each commit retired; reads skip them, and they are
forgotten with their entries.
"""

from __future__ import annotations

import threading
from collections import deque
from itertools import islice
from operator import itemgetter

from timerwheel.store.timer_store import FiredEntry  # (fire seq, message id, record as committed)

ENTRY_OVERHEAD_BYTES = 168  # sys.getsizeof: tuple 64, int 28, two empty bytes 66, a deque slot 8
_SEQ, _ID, _RECORD = itemgetter(0), itemgetter(1), itemgetter(2)


def entries_bytes(entries: list[FiredEntry]) -> int:
    """What `entries` are charged: each its id and record plus ENTRY_OVERHEAD_BYTES,
    counted by C-implemented builtins (`map`, `len`, `sum`) with no Python frame per entry
    (a burst's fire chunk is 10,000 of them; a call per entry was a visible share of the
    engine's CPU there)."""
    ids, records = map(_ID, entries), map(_RECORD, entries)
    return sum(map(len, ids)) + sum(map(len, records)) + ENTRY_OVERHEAD_BYTES * len(entries)


class FiredCache:
    def __init__(self, start_seq: int, max_bytes: int) -> None:
        self._start_seq = start_seq
        self._max_bytes = max_bytes
        self._topics: dict[str, deque[FiredEntry]] = {}
        self._topic_bytes: dict[str, int] = {}
        self._floors: dict[str, int] = {}
        self._retired: dict[str, set[int]] = {}  # per topic: cached seqs acked or moved
        self._bytes = 0
        self._lock = threading.Lock()

    def add(
        self, fired: dict[str, list[FiredEntry]], retired: dict[str, list[int]] | None = None
    ) -> None:
        """One committed batch: its fired entries per topic in fire order, and the fire
        sequences whose ready entries it removed (acks, dead letters)."""
        with self._lock:
            for topic, entries in fired.items():
                self._topics.setdefault(topic, deque()).extend(entries)
                added = entries_bytes(entries)
                self._topic_bytes[topic] = self._topic_bytes.get(topic, 0) + added
                self._bytes += added
            for topic, seqs in (retired or {}).items():
                entries = self._topics.get(topic)
                if entries:  # only what is cached: older sequences are not served from here
                    first = entries[0][0]
                    self._retired.setdefault(topic, set()).update(s for s in seqs if s >= first)
            while self._bytes > self._max_bytes:
                self._drop_largest()

    @property
    def bytes(self) -> int:
        """What the cached entries are charged (records, ids, overhead)."""
        with self._lock:
            return self._bytes

    def read_raw(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[FiredEntry] | None:
        """Fired entries above `after_seq`, or None when the cache cannot answer: (fire seq,
        message id, record), at most `limit`, and records of about `max_bytes` when given
        (as `TimerStore.read_ready_raw`)."""
        with self._lock:
            if after_seq < self._floors.get(topic, self._start_seq):
                return None
            entries = self._topics.get(topic)
            if not entries:
                return []
            retired = self._retired.get(topic)
            dropped = []
            while entries and entries[0][0] <= after_seq:  # the reader holds these
                dropped.append(entries.popleft())
            if dropped:
                freed = entries_bytes(dropped)
                self._topic_bytes[topic] -= freed
                self._bytes -= freed
                if retired:
                    retired.difference_update(map(_SEQ, dropped))
            # What was dropped is no longer here: an earlier cursor must go to RocksDB.
            self._floors[topic] = max(after_seq, self._floors.get(topic, self._start_seq))
            live = entries if not retired else (e for e in entries if e[0] not in retired)
            return _within(live, limit, max_bytes)

    def _drop_largest(self) -> None:
        topic = max(self._topic_bytes, key=self._topic_bytes.__getitem__)
        entries = self._topics.pop(topic)
        self._retired.pop(topic, None)
        self._bytes -= self._topic_bytes.pop(topic)
        if entries:
            self._floors[topic] = entries[-1][0]


def _within(entries, limit: int, max_bytes: int) -> list[FiredEntry]:
    """The first entries, up to `limit` and (when given) until `max_bytes` of records."""
    if not max_bytes:
        return list(islice(entries, limit))
    picked, held = [], 0
    for entry in islice(entries, limit):
        picked.append(entry)
        held += len(entry[2])
        if held >= max_bytes:
            break
    return picked
