"""Timer reads on RocksDB, for any thread, and the column families they go through.

`TimerReads` answers `get`, `find_wheel`, `list_pending`, `read_ready_raw`, `scan` and the
rest from committed data, on any thread. It holds the column-family objects of the open
database, which is why it also owns `reopen` and `close`: rocksdict keeps the LOCK while
any such object is alive (timerwheel.store.rocks), so they are dropped before the database closes,
and until they are bound again every read raises StoreUnavailable. `TimerStore`
(timerwheel.store.timer_store) adds the staged writes of the one writer thread.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from heapq import merge
from itertools import islice

from rocksdict import ReadOptions

from timerwheel.common import State
from timerwheel.store import integrity, keys, records
from timerwheel.store.rocks import RocksDatabase
from timerwheel.store.trace import TraceLog
from timerwheel.wheels.domain import StoreUnavailable, Timer
from timerwheel.wheels.scheduler import SchedulerState

WheelEntry = tuple[bytes, bytes]  # (wheel key, topic)
LIST_READ_CHUNK = 16  # records per multi-get (List, fired reads): 64 MiB at most of 4 MiB bodies


class _ClosedFamily:
    """Stands for every column family while the database is closed or reopening."""

    def __getattr__(self, name: str):
        raise StoreUnavailable(f"the store is being reopened ({name}); retry")

    def __getitem__(self, key: bytes):
        raise StoreUnavailable("the store is being reopened; retry")


@dataclass(frozen=True)
class PendingPage:
    timers: list[Timer]
    next_after: bytes | None  # wheel key to continue after, None at the end of the range


class TimerReads:
    """The read half of `TimerStore`: the open database's column families, bound once
    (and again after a reopen) so a read goes straight to its family object."""

    def __init__(self, database: RocksDatabase) -> None:
        self.database = database
        self._bind()

    def _bind(self) -> None:
        """Take the column-family objects of the open database (again, after a reopen)."""
        cf = self.database.families
        self._messages = cf[keys.CF_MESSAGES]
        self._ready = cf[keys.CF_READY]
        self._expiry = cf[keys.CF_EXPIRY]
        self._meta = cf[keys.CF_META]
        self._wheels = {name: cf[family] for name, family in keys.CF_WHEEL.items()}
        self.trace = TraceLog(cf[keys.CF_TRACE], self._meta)

    def _unbind(self) -> None:
        """Drop every column-family object (they hold the LOCK); reads meanwhile raise
        StoreUnavailable, through the closed database's families."""
        closed = _ClosedFamily()
        self._messages = self._ready = self._expiry = self._meta = closed
        self._wheels = {name: closed for name in keys.CF_WHEEL}
        self.trace = closed  # rebuilt by `_bind`: it rereads its sequence from `meta`

    def reopen(self) -> None:
        """Close and reopen the database in this process (see RocksDatabase.reopen); for
        the writer thread only. If the open fails, the store stays closed until a later
        `reopen` succeeds."""
        self._unbind()
        self.database.reopen()
        self._bind()

    def close(self) -> None:
        """Drop every column-family reference, then close the database (releases the LOCK)."""
        self._unbind()
        self.database.close()

    # == reads ==========================================================================
    def get_record(self, message_id: str) -> bytes | None:
        return self._messages.get(message_id.encode())

    def get(self, message_id: str) -> Timer | None:
        raw = self.get_record(message_id)
        return None if raw is None else records.decode_timer(message_id, raw)

    def find_wheel(self, timer: Timer, candidates: Iterable[str]) -> str:
        """Which of the candidate wheels holds the scheduled `timer` ('' if none)."""
        key = keys.wheel_key(timer.deliver_at_ms, timer.message_id)
        for name in candidates:
            if self._wheels[name].get(key) is not None:
                return name
        return ""

    def scan(self, wheel: str, lo: bytes, hi: bytes, limit: int) -> list[WheelEntry]:
        """Up to `limit` (key, topic) entries of `wheel` in [lo, hi), in key order."""
        if hi <= lo:
            return []
        # Hot path (cascades, firing): no generator; the ReadOptions that holds the
        # bound stays referenced until the list is built (see _range).
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(hi)
        items = self._wheels[wheel].items(from_key=lo, read_opt=read_options)
        return list(islice(items, limit))

    def first_key(self, wheel: str, lo: bytes) -> bytes | None:
        for key, _ in self._range(self._wheels[wheel], lo, None):
            return key
        return None

    def list_pending(
        self,
        topic: str,
        from_ms: int,
        to_ms: int,
        limit: int,
        after: bytes | None,
        floors: dict[str, bytes],
        scan_budget: int,
        max_bytes: int = 2**62,
        include_body: bool = True,
    ) -> PendingPage:
        """Scheduled timers of `topic` due in [from_ms, to_ms), across all wheels, by time.

        The three wheels are range-scanned and merged by key. `floors` skip the part of
        each wheel that can hold only tombstones (fired or cascaded keys). At most
        `scan_budget` keys are examined, so a sparse topic cannot pin the server; the
        page then ends early with a continuation key. The page also ends once the timers
        it holds reach `max_bytes` (one timer at least), so a page of big bodies cannot
        take the server's memory; without `include_body` bodies are dropped and not counted.
        """
        lo = keys.time_bound(from_ms)
        if after is not None:
            lo = max(lo, after + b"\x00")
        hi = keys.time_bound(to_ms)
        streams = [
            self._range(self._wheels[name], max(lo, floors.get(name, lo)), hi)
            for name in self._wheels
        ]
        wanted = topic.encode()
        found: list[bytes] = []
        last_key = None
        for examined, (key, entry_topic) in enumerate(merge(*streams)):
            if examined >= scan_budget:
                return self._page(found, last_key, max_bytes, include_body)
            last_key = key
            if entry_topic == wanted:
                found.append(key)
                if len(found) == limit:
                    return self._page(found, key, max_bytes, include_body)
        return self._page(found, None, max_bytes, include_body)

    def _page(
        self, wheel_keys: list[bytes], next_after: bytes | None, max_bytes: int,
        include_body: bool,
    ) -> PendingPage:  # fmt: skip
        """The timers of `wheel_keys`, read a few at a time (a multi-get of a whole page of
        4 MiB bodies would itself be gigabytes) until they hold `max_bytes`."""
        timers: list[Timer] = []
        held = 0
        previous_key = b""  # the last key on the page: where the next page continues
        for start in range(0, len(wheel_keys), LIST_READ_CHUNK):
            chunk = wheel_keys[start : start + LIST_READ_CHUNK]
            ids = keys.wheel_key_ids(chunk)
            for key, message_id, raw in zip(chunk, ids, self._messages.get(ids), strict=True):
                if raw is None:
                    continue
                timer = records.decode_timer(message_id.decode(), raw)
                size = len(raw) if include_body else len(raw) - len(timer.body)
                if timers and held + size > max_bytes:
                    return PendingPage(timers, previous_key)
                held += size
                timers.append(timer if include_body else replace(timer, body=b""))
                previous_key = key
        return PendingPage(timers, next_after)

    def read_ready_raw(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[tuple[int, bytes, bytes]]:
        """Fired, un-acked timers of `topic` with fire sequence above `after_seq`, as (fire
        seq, message id, record) in fire order (`records.decode_fired` decodes them); at most
        `limit` of them and, when `max_bytes` is given, records of about that many bytes
        (the one that reaches it is the last; one at least). Records are read in small
        multi-gets, so a read of big bodies stops at its budget instead of holding them."""
        prefix = keys.ready_prefix(topic)
        entries = list(
            islice(
                self._range(
                    self._ready, keys.ready_key(topic, after_seq + 1), keys.prefix_end(prefix)
                ),
                limit,
            )
        )
        found, held = [], 0
        for start in range(0, len(entries), LIST_READ_CHUNK):
            chunk = entries[start : start + LIST_READ_CHUNK]
            raws = self._messages.get([message_id for _, message_id in chunk])
            for (key, message_id), raw in zip(chunk, raws, strict=True):
                if raw is not None and records.record_state(raw) is State.FIRED:
                    found.append((keys.ready_seq(key), message_id, raw))
                    held += len(raw)
                    if max_bytes and held >= max_bytes:
                        return found
        return found

    def count_ready(self, topic: str) -> int:
        prefix = keys.ready_prefix(topic)
        return sum(1 for _ in self._range(self._ready, prefix, keys.prefix_end(prefix)))

    def ready_topics(self) -> list[str]:
        """Topics that have fired, un-acked timers (for redelivery after a restart)."""
        topics = []
        lo = b""
        while True:
            key = next((k for k, _ in self._range(self._ready, lo, None)), None)
            if key is None:
                return topics
            topic = keys.ready_key_topic(key).decode()
            topics.append(topic)
            lo = keys.prefix_end(keys.ready_prefix(topic))

    def estimate_keys(self, family: str) -> int:
        value = self.database.families[family].property_int_value("rocksdb.estimate-num-keys")
        return int(value or 0)

    def load_state(self) -> SchedulerState | None:
        """The scheduler state persisted by the last commit; None for a new store (every
        column family empty). A store with data whose `meta` is missing, damaged or of
        another schema version raises `timerwheel.store.integrity.StoreDamaged`."""
        if integrity.is_empty(self.database.families):
            return None
        return integrity.decode_state(self.database.path, self._meta)

    @staticmethod
    def _range(family, lo: bytes, hi: bytes | None) -> Iterator[tuple[bytes, bytes]]:
        """Items in [lo, hi), lazily.

        Two rocksdict 0.3.29 traps: `set_iterate_lower_bound` sets the UPPER bound, so the
        lower bound is the start key; and the iterator borrows the upper-bound buffer from
        its ReadOptions without keeping it alive, so the ReadOptions must outlive the
        iteration (it lives in this generator's frame). Returning the bare iterator let
        the bound be freed and scans stopped early (seen in the model test).
        """
        if hi is not None and hi <= lo:
            return
        read_options = ReadOptions()
        if hi is not None:
            read_options.set_iterate_upper_bound(hi)
        yield from family.items(from_key=lo, read_opt=read_options)
