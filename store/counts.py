"""Pending-timer counters: per topic and per minute of deliver time, kept by the writer.

`Count(topic, from_ms, to_ms)` is answered from these, never by listing timers. Every
staged change of a SCHEDULED timer's wheel key adds a delta to its batch
(`StagedBatch.count_deltas`): a new timer +1 in its minute, a fired, cancelled,
rescheduled or replaced one -1 in its old minute. Cascades move keys between wheels
and change no count. Before the batch commits, `stage` turns the deltas into absolute
values in the ``counts`` column family, in the same WriteBatch, so the counters are
exactly as durable as the timers; the values are kept in memory too (the writer's
read-modify-write needs no read), updated only once the batch committed.

Exactness: a topic's total (one ``topic + 0x01`` key) is exact. A time range is
answered in whole minutes: the count covers every timer due in a minute that [from_ms,
to_ms) touches, so it is exact when both ends are whole minutes and may include timers
of the two edge minutes otherwise (the response says which minutes it covered).

A store written before the counters existed has no ``counts.built`` marker in `meta`;
it is counted once at open from the wheel keys (each holds its topic), then maintained.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from itertools import islice

from rocksdict import ReadOptions

from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.rocks import RocksDatabase

BUCKET_MS = keys.COUNT_BUCKET_MS


@dataclass(frozen=True)
class CountChanges:
    """The new absolute values a batch gives its counters: minute keys, and topic totals."""

    minutes: dict[bytes, int]
    totals: dict[bytes, int]

    def __bool__(self) -> bool:
        return bool(self.minutes or self.totals)


class PendingCounts:
    def __init__(self, database: RocksDatabase) -> None:
        # No column-family object is kept here: a live one would hold the database's LOCK
        # after close (timerwheel.store.rocks.RocksDatabase.close).
        self._database = database
        self._lock = threading.Lock()  # readers of `_values` vs the writer's commit
        self._values: dict[bytes, int] = {}
        for key, value in database.families[keys.CF_COUNTS].items():
            self._values[key] = keys.decode_u64(value)
        if database.families[keys.CF_META].get(keys.META_COUNTS_BUILT) is None:
            self._build()
        # Topics with pending timers (their total key), so a forecast need not scan.
        self._topics = {
            keys.count_total_topic(key) for key in self._values if keys.is_count_total_key(key)
        }

    def _build(self) -> None:
        """Count an older store's wheels once (each wheel key holds its topic)."""
        values: dict[bytes, int] = {}
        for family in keys.CF_WHEEL.values():
            for key, topic in self._database.families[family].items():
                for counter in keys.count_keys(topic, keys.key_time_ms(key)):
                    values[counter] = values.get(counter, 0) + 1
        batch = StagedBatch()
        batch.writes[keys.CF_COUNTS].update(
            {key: keys.encode_u64(value) for key, value in values.items()}
        )
        batch.writes[keys.CF_META][keys.META_COUNTS_BUILT] = keys.encode_u64(1)
        if not self._database.read_only:  # (a full disk) counted again at the next open
            self._database.write(batch.to_write_batch(self._database.handles))
        self._values = values

    def stage(self, batch: StagedBatch) -> CountChanges:
        """Stage the new absolute value of every counter the batch changes (its minute
        deltas, and per topic their sum for the total); returns them, for `committed`
        once the batch is durable.

        The send hot path: with deliver times spread over weeks nearly every timer of a
        batch has a minute of its own, so this runs once per timer. Hence the plain loop
        with local names and the topic sliced in place (``keys.COUNT_TOPIC_END``).
        """
        get, topic_end = self._values.get, keys.COUNT_TOPIC_END
        minutes: dict[bytes, int] = {}
        topic_deltas: dict[bytes, int] = {}
        for key, delta in batch.count_deltas.items():
            if delta:
                minutes[key] = get(key, 0) + delta
                topic = key[:topic_end]
                topic_deltas[topic] = topic_deltas.get(topic, 0) + delta
        totals = {
            keys.count_total_key(topic): get(keys.count_total_key(topic), 0) + delta
            for topic, delta in topic_deltas.items()
            if delta
        }
        encode = keys.encode_u64
        writes = batch.writes[keys.CF_COUNTS]
        writes.update({key: encode(value) if value > 0 else None for key, value in minutes.items()})
        writes.update({key: encode(value) if value > 0 else None for key, value in totals.items()})
        return CountChanges(minutes, totals)

    def committed(self, changes: CountChanges) -> None:
        """Take a durable batch's new values into memory (a counter at 0 is dropped)."""
        emptied = [key for key, value in changes.minutes.items() if value <= 0]
        with self._lock:
            values = self._values
            values.update(changes.minutes)
            for key in emptied:
                del values[key]
            for key, value in changes.totals.items():
                topic = keys.count_total_topic(key)
                if value > 0:
                    values[key] = value
                    self._topics.add(topic)
                else:
                    values.pop(key, None)
                    self._topics.discard(topic)

    def due_within(self, now_ms: int, horizons_ms: tuple[int, ...]) -> dict[int, int]:
        """Pending timers of every topic due in the whole minutes [now_ms, now_ms + h)
        touches, per horizon h: from the in-memory counters, one lookup per topic and
        minute, no read of the store (the metrics forecast)."""
        with self._lock:
            topics = list(self._topics)
        first = now_ms - now_ms % BUCKET_MS
        values, bucket_key = self._values, keys.count_bucket_key
        result = dict.fromkeys(horizons_ms, 0)
        for topic in topics:
            running, start = 0, first
            for horizon in sorted(horizons_ms):
                while start < now_ms + horizon:
                    running += values.get(bucket_key(topic, start), 0)
                    start += BUCKET_MS
                result[horizon] += running
        return result

    def total(self, topic: str) -> int:
        """Every pending timer of `topic`: exact."""
        with self._lock:
            return self._values.get(keys.count_total_key(topic.encode()), 0)

    def totals(self) -> dict[str, int]:
        """Every topic with pending timers, and how many: exact, from memory."""
        with self._lock:
            values = self._values
            return {topic.decode(): values[keys.count_total_key(topic)] for topic in self._topics}

    def in_range(self, topic: str, from_ms: int, to_ms: int) -> tuple[int, int, int]:
        """(count, first minute start, end of last minute) for the whole minutes that
        [from_ms, to_ms) touches, from the committed counters (one range scan)."""
        lo_ms = from_ms - from_ms % BUCKET_MS
        hi_ms = min(to_ms + (-to_ms) % BUCKET_MS, keys.NO_TIME_BOUND_MS)
        topic_bytes = topic.encode()
        read_options = (
            ReadOptions()
        )  # kept referenced while iterating (timerwheel.store.timer_reads)
        read_options.set_iterate_upper_bound(keys.count_bucket_key(topic_bytes, hi_ms))
        items = self._database.families[keys.CF_COUNTS].items(
            from_key=keys.count_bucket_key(topic_bytes, lo_ms), read_opt=read_options
        )
        count = sum(keys.decode_u64(value) for _, value in islice(items, None))
        return count, lo_ms, hi_ms
