"""The store layouts `bench.layout_prototype` compares (decision 0014), each reduced to
what the burst executes: send, fire, fetch, ack, sweep. Not the engine: no validation,
series, extras, trace, cancel or lease; the same RocksDB options (`store/rocks.py`).

`PerMessage` is today's layout built the same way as `Batch`, so the two differ only in
the layout: a record and a wheel key a message at the send; the record patched FIRED, a
`ready` entry and the wheel key's delete at the fire; the record patched ACKED, the
`ready` delete and one `expiry` entry an Ack call; the record's delete at the sweep.
The batch-level layout is in `bench.layout_batch`; `Counted` serves both.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from itertools import repeat

from rocksdict import Cache, Rdict, ReadOptions, WriteBatch

from timerwheel.store.rocks import RocksTuning, _options

U64 = struct.Struct(">Q")
_HEADER = struct.Struct(">BBBqqqqqqq")  # as store/records.py: the record's 60-byte header
_STATE_FIELD = struct.Struct(">B")
_FIRED_FIELDS = struct.Struct(">qqqq")  # fired_at, acked_at, cancelled_at, ready_seq
_END = _HEADER.size  # fired_at, acked_at, cancelled_at, ready_seq end here
_SCHEDULED, _FIRED, _ACKED = 1, 2, 3


class Counted:
    """RocksDB opened with store/rocks.py's options; every entry written and read counted."""

    def __init__(self, path: str, families: dict[str, str], sync: bool = True) -> None:
        tuning = RocksTuning(sync_writes=sync)
        cache = Cache(tuning.block_cache_bytes)
        # Each family takes the options of the family of today's layout it stands for.
        options = {name: _options(tuning, cache, like) for name, like in families.items()}
        self.db = Rdict(path, options=_options(tuning, cache), column_families=options)
        self.cf = {name: self.db.get_column_family(name) for name in families}
        self.handles = {name: self.db.get_column_family_handle(name) for name in families}
        self.sync = sync
        self.written = 0
        self.read = 0

    def commit(self, staged: dict[str, dict[bytes, bytes | None]]) -> None:
        """One group commit, as StagedBatch.to_write_batch: each family's keys sorted."""
        batch = WriteBatch(raw_mode=True)
        put, delete = batch.put, batch.delete
        for family, writes in staged.items():
            handle = self.handles[family]
            self.written += len(writes)
            for key in sorted(writes):
                value = writes[key]
                if value is None:
                    delete(key, handle)
                else:
                    put(key, value, handle)
        self.db.write(batch)
        if self.sync:
            self.db.flush_wal(True)

    def walk(self, family: str, first: bytes, end: bytes, limit: int = 1 << 62):
        """(key, value) of `family` in [first, end), at most `limit`."""
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(end)
        found = []
        for item in self.cf[family].items(from_key=first, read_opt=read_options):
            found.append(item)
            if len(found) >= limit:
                break
        self.read += len(found)
        return found

    def walk_keys(self, family: str, first: bytes, end: bytes) -> list[bytes]:
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(end)
        found = list(self.cf[family].keys(from_key=first, read_opt=read_options))
        self.read += len(found)
        return found

    def close(self) -> None:
        self.cf.clear()
        self.handles.clear()
        self.db.close()


class PerMessage:
    """Today's layout (store/keys.py), reduced to the burst's operations."""

    FAMILIES = {
        "messages": "messages",
        "wheel_second": "wheel_second",
        "ready": "ready",
        "expiry": "expiry",
        "counts": "counts",
        "meta": "meta",
    }

    def __init__(
        self, path: str, rng, retention_ms: int, fire_chunk: int, sync=True, segment_max: int = 0
    ) -> None:
        self.store = Counted(path, self.FAMILIES, sync)
        self.rng, self.retention_ms, self.fire_chunk = rng, retention_ms, fire_chunk
        self.fire_seq = 0
        self.cursor = U64.pack(0)
        self.fired: dict[str, list[tuple[int, bytes, bytes]]] = {}  # the fired cache

    def send(self, topic: str, bodies: list[bytes], due: list[int], now_ms: int) -> list[bytes]:
        records, wheel, counts = {}, {}, {}
        t = topic.encode()
        tail = struct.pack(">H", len(t)) + t + b"\x00\x00"
        getrandbits = self.rng.getrandbits
        ids = []
        for body, ms in zip(bodies, due, strict=True):
            mid = b"%012x%020x" % (ms, getrandbits(80))
            ids.append(mid)
            records[mid] = _HEADER.pack(1, _SCHEDULED, 2, ms, ms, now_ms, 0, 0, 0, 0) + tail + body
            wheel[U64.pack(ms) + mid] = t
            minute = t + b"\x00" + U64.pack(ms - ms % 60_000)
            counts[minute] = counts.get(minute, 0) + 1
        counts = {k: U64.pack(v) for k, v in counts.items()}  # a counter a minute a commit
        self.store.commit({"messages": records, "wheel_second": wheel, "counts": counts})
        return ids

    def _records(self, ids: list[bytes]) -> dict[bytes, bytes]:
        """A walk of `messages` over the ids' range, as store/range_reads.py."""
        wanted = set(ids)
        ordered = sorted(wanted)
        rows = self.store.walk("messages", ordered[0], ordered[-1] + b"\x00")
        return {k: v for k, v in rows if k in wanted}

    def fire(self, now_ms: int) -> int:
        due = self.store.walk("wheel_second", self.cursor, U64.pack(now_ms + 1), self.fire_chunk)
        if not due:
            return 0
        records = self._records([key[8:] for key, _ in due])
        staged_records, ready, wheel, counts = {}, {}, {}, {}
        for key, topic in due:
            mid = key[8:]
            record = records[mid]
            self.fire_seq += 1
            record = (
                record[:1]
                + _STATE_FIELD.pack(_FIRED)
                + record[2:27]
                + _FIRED_FIELDS.pack(now_ms, 0, 0, self.fire_seq)
                + record[_END:]
            )
            staged_records[mid] = record
            ready[topic + b"\x00" + U64.pack(self.fire_seq)] = mid
            wheel[key] = None
            self.fired.setdefault(topic.decode(), []).append((self.fire_seq, mid, record))
            minute = topic + b"\x00" + U64.pack(int(key[:8].hex(), 16) // 60_000 * 60_000)
            counts[minute] = counts.get(minute, 0) - 1
        self.cursor = due[-1][0] + b"\x00"
        meta = {b"fire_seq": U64.pack(self.fire_seq), b"cursor": self.cursor}
        counts = {k: U64.pack(max(v, 0)) for k, v in counts.items()}
        self.store.commit(
            {
                "messages": staged_records,
                "ready": ready,
                "wheel_second": wheel,
                "counts": counts,
                "meta": meta,
            }
        )
        return len(due)

    def fetch(self, topic: str, after_seq: int, limit: int) -> list[tuple[int, bytes, bytes]]:
        """From the fired cache: (seq, id, body) of each fired message after `after_seq`."""
        entries = self.fired.get(topic, [])
        start = bisect_right(entries, after_seq, key=lambda entry: entry[0])
        body = _END + 4 + len(topic)
        return [(seq, mid, record[body:]) for seq, mid, record in entries[start : start + limit]]

    def ack(self, topic: str, ids: list[bytes], now_ms: int) -> int:
        records = self._records(ids)
        staged, ready = {}, {}
        t = topic.encode()
        for mid in ids:
            record = records.get(mid)
            if record is None or record[1] != _FIRED:
                continue
            staged[mid] = (
                record[:1]
                + _STATE_FIELD.pack(_ACKED)
                + record[2:35]
                + U64.pack(now_ms)
                + record[43:]
            )
            ready[t + b"\x00" + record[51:_END]] = None
        expiry = {U64.pack(now_ms + self.retention_ms) + ids[0]: b"\x00".join(staged)}
        self.store.commit({"messages": staged, "ready": ready, "expiry": expiry if staged else {}})
        return len(staged)

    def sweep(self, now_ms: int, chunk: int) -> int:
        due = self.store.walk("expiry", b"", U64.pack(now_ms + 1), chunk)
        records = {}
        for _, value in due:
            records.update(zip(value.split(b"\x00"), repeat(None)))
        self.store.commit({"messages": records, "expiry": dict.fromkeys(k for k, _ in due)})
        return len(records)

    def close(self) -> None:
        self.store.close()
