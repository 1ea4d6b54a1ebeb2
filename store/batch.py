"""A group commit being built: the final value of every key it writes, per column family."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

from rocksdict import WriteBatch

from timerwheel.store import keys


class SeriesChange(NamedTuple):
    """A recurring series as one batch leaves it (timerwheel.engine.series): its record and
    `extras` (None, None: retired), and the occurrences (number, schedule time) the batch
    fired. Reported to the engine's series listeners after the commit (cluster mode logs
    them: timerwheel.cluster.series_log)."""

    series_id: str
    record: bytes | None
    extras: bytes | None
    occurrences: tuple[tuple[int, int], ...] = ()


@dataclass
class StagedBatch:
    """One group commit being built: the final value of every key it writes.

    Writes are held per column family as ``{key: value}``, where a value of None means
    delete, and turned into one WriteBatch at commit. Since each key keeps only its last
    write, the outcome is that of applying the writes in the order they were staged,
    and two things follow:

    - an operation later in the group reads what an earlier one staged (`records` is
      the `messages` family's staged writes; a cancel after a send of the same id sees
      the send);
    - commit can hand each family's keys to RocksDB in sorted order. The memtable is a
      skiplist that remembers where it last inserted, so keys in order insert cheaply,
      while random wheel keys (deliver times spread over weeks) into a large memtable
      miss the CPU cache at every level: about four times the cost of inserting them
      sorted, and the sort itself costs a small part of the difference.
    """

    writes: dict[str, dict[bytes, bytes | None]] = field(
        default_factory=lambda: {family: {} for family in keys.ALL_COLUMN_FAMILIES}
    )
    # Committed records read ahead for this batch's operations in one read
    # (timerwheel.store.range_reads): every call into RocksDB gives up the GIL and waits to get it
    # back from the gRPC threads, so one read for the whole group beats one per operation.
    prefetched: dict[bytes, bytes | None] = field(default_factory=dict)
    fired_topics: set[str] = field(default_factory=set)
    fired_entries: dict[str, list[tuple[int, bytes, bytes]]] = field(default_factory=dict)
    # Fire sequences whose `ready` entries this batch removes (acks, dead letters), per
    # topic: the fired cache must not hand those out again (timerwheel.engine.fired_cache).
    retired: dict[str, list[int]] = field(default_factory=dict)
    # Trace events of this group, (message id, encoded event), keyed at commit
    # (timerwheel.store.trace.TraceLog.stage).
    trace: list[tuple[bytes, bytes]] = field(default_factory=list)
    fired: int = 0
    operations: int = 0
    # Changes of the pending-timer counters, per minute counter key (timerwheel.store.counts).
    count_deltas: dict[bytes, int] = field(default_factory=dict)
    # Recurring series found due: (id, record, topic, fire seq), fired by timerwheel.engine.series.
    series_due: list[tuple[bytes, bytes, str, int]] = field(default_factory=list)
    # Every series this batch created, moved, paused, stepped or retired, in order.
    series_changes: list[SeriesChange] = field(default_factory=list)
    # The scheduler's state as `meta` holds it once this batch is committed (every value,
    # staged or not: timerwheel.store.timer_store.TimerStore.stage_state).
    meta_state: dict[bytes, bytes | None] = field(default_factory=dict)

    def remove_ready(self, topic: str, seq: int) -> None:
        """A fired message leaves `topic`'s ready entries (acked, or moved to its DLQ)."""
        self.writes[keys.CF_READY][keys.ready_key(topic, seq)] = None
        self.retired.setdefault(topic, []).append(seq)

    @property
    def records(self) -> dict[bytes, bytes | None]:
        """The `messages` records this batch writes (None: deleted)."""
        return self.writes[keys.CF_MESSAGES]

    def to_write_batch(self, handles: dict) -> WriteBatch:
        """The staged writes as one WriteBatch, each family's keys in sorted order."""
        write_batch = WriteBatch(raw_mode=True)
        put, delete = write_batch.put, write_batch.delete
        for family, staged in self.writes.items():
            handle = handles[family]
            for key in sorted(staged):
                value = staged[key]
                if value is None:
                    delete(key, handle)
                else:
                    put(key, value, handle)
        return write_batch
