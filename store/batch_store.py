"""A store in the batch-level layout, schema version 2 (decision 0014), opened or created.

Version 1 stays the default: `timerwheel.store.open_store` opens and creates only version-1
stores, and refuses a version-2 one (its `meta` is not a version-1 scheduler state).
A version-2 store is created only by `open_batch_store`, which a test or a bench calls
by name: the engine can send into one (`BatchStore.send`), fire it and keep what the Ack
needs (`BatchStore.acker`), Ack, sweep, Cancel and move its messages (`acker`,
`overrides`) and read it (`BatchStore.reads`), but the engine does not call them yet, so
no server setting creates one.

A version-1 store is upgraded when `open_batch_store` opens it
(`timerwheel.store.segment_upgrade`, decision 0014 step 5).

A new version-2 store gets its `meta` at once: the schema version, and the `counts`
marker that says the counters cover every wheel entry (`timerwheel.store.counts`
rebuilds them from version-1 wheel keys otherwise, which a version-2 wheel has not).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from rocksdict import Rdict

from timerwheel.durations import DAY_MS
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.batch_reads import BatchTimerReads
from timerwheel.store.counts import PendingCounts
from timerwheel.store.integrity import StoreDamaged, check_data_dir, is_empty
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.segment_ack import SegmentAcker
from timerwheel.store.segment_fire import SegmentFirer
from timerwheel.store.segment_life import LiveSegments
from timerwheel.store.segment_moves import SegmentMoves
from timerwheel.store.segment_override import SegmentOverrides
from timerwheel.store.segment_send import NewSends, SegmentSender, StagedSends
from timerwheel.store.segment_upgrade import (
    BATCH_MESSAGES,
    UPGRADE_FAMILIES,
    drop_messages,
    needs_upgrade,
    upgrade_v1,
)
from timerwheel.store.segments import SEGMENT_MAX

SCHEMA_VERSION = bk.PLANNED_SCHEMA_VERSION
RETENTION_MS = 3 * DAY_MS  # as version 1's default (`timerwheel.wheels.settings`)


def new_batch() -> StagedBatch:
    """An empty group commit of a version-2 store: its families' writes."""
    return StagedBatch(writes={family: {} for family in bk.PLANNED_COLUMN_FAMILIES})


class BatchStore:
    """A version-2 store open for its one writer thread: reads for any thread (`reads`),
    the staging of the send, the fire, the Ack, the sweep and the overrides (`sender`,
    `firer`, `acker`, `overrides`, over one memory of the live segments, `life`) and the
    commit that keeps the counters."""

    def __init__(
        self, database: RocksDatabase, segment_max: int = SEGMENT_MAX,
        randbytes: Callable[[int], bytes] = os.urandom, retention_ms: int = RETENTION_MS,
    ) -> None:  # fmt: skip
        self.database = database
        families = database.families
        self.reads = BatchTimerReads(families)
        self.firer = SegmentFirer(families)
        self.sender = SegmentSender(families, segment_max, randbytes, self.firer.placed)
        self.life = LiveSegments(families, retention_ms)
        self.acker = SegmentAcker(families, self.firer, self.life)
        self.overrides = SegmentOverrides(families, self.firer, self.life)
        self.moves = SegmentMoves(families, self.overrides, self.sender)
        self.counts = PendingCounts(database)

    def send(self, sends: NewSends, created_ms: int, sync: bool = True) -> StagedSends:
        """One group commit of `sends` alone, committed before it returns."""
        batch = new_batch()
        staged = self.sender.stage(batch, sends, created_ms)
        self.commit(batch, sync)
        return staged

    def commit(self, batch: StagedBatch, sync: bool = True) -> None:
        """Write the batch atomically, its counters' new values with it
        (`timerwheel.store.rocks.RocksDatabase.write` says what `sync` promises)."""
        changes = self.counts.stage(batch)
        self.database.write(batch.to_write_batch(self.database.handles), sync)
        self.counts.committed(changes)

    def close(self) -> None:
        """Close the database (release its LOCK); the readers' families go with it."""
        self.database.close()


def open_batch_store(
    data_dir: str, tuning: RocksTuning | None = None, *, segment_max: int = SEGMENT_MAX,
    randbytes: Callable[[int], bytes] = os.urandom, retention_ms: int = RETENTION_MS,
    upgrade_batch: int = BATCH_MESSAGES,
) -> BatchStore:  # fmt: skip
    """The version-2 store in `data_dir`, created when the directory is new or empty. A
    version-1 store is upgraded first (`timerwheel.store.segment_upgrade`, in batches of
    `upgrade_batch` entries; an upgrade a crash cut short resumes); one whose `meta`
    names another version raises `StoreDamaged`."""
    if not check_data_dir(data_dir) and keys.CF_MESSAGES in Rdict.list_cf(data_dir):
        _upgrade(data_dir, tuning, segment_max, randbytes, retention_ms, upgrade_batch)
    database = RocksDatabase(data_dir, tuning, column_families=bk.PLANNED_COLUMN_FAMILIES)
    try:
        if is_empty(database.families):
            batch = new_batch()
            batch.writes[keys.CF_META].update({
                keys.META_SCHEMA_VERSION: keys.encode_u64(SCHEMA_VERSION),
                keys.META_COUNTS_BUILT: keys.encode_u64(1),
            })  # fmt: skip
            database.write(batch.to_write_batch(database.handles))
        _check_meta(database)
        return BatchStore(database, segment_max, randbytes, retention_ms)
    except BaseException:
        database.close()
        raise


def _upgrade(
    data_dir: str, tuning: RocksTuning | None, segment_max: int,
    randbytes: Callable[[int], bytes], retention_ms: int, upgrade_batch: int,
) -> None:  # fmt: skip
    """Upgrade the version-1 store in `data_dir` (or finish an upgrade cut short, or drop
    the `messages` family an upgrade left when it stopped after its last batch)."""
    database = RocksDatabase(data_dir, tuning, column_families=UPGRADE_FAMILIES)
    try:
        if needs_upgrade(database.families):
            upgrade_v1(
                database, segment_max=segment_max, retention_ms=retention_ms,
                randbytes=randbytes, batch_messages=upgrade_batch,
            )  # fmt: skip
        else:
            drop_messages(database)
    finally:
        database.close()


def _check_meta(database: RocksDatabase) -> None:
    """StoreDamaged unless `meta` says version 2 and the counters are built. No
    column-family object outlives the call: one would hold the LOCK through a close."""
    families: Any = database.families
    get = families[keys.CF_META].get
    raw, built = get(keys.META_SCHEMA_VERSION), get(keys.META_COUNTS_BUILT)
    del get
    version = None if raw is None else keys.decode_u64(raw)
    if version != SCHEMA_VERSION or built is None:
        raise StoreDamaged(
            f"data dir {database.path!r} has the batch-level layout's families but its "
            f"`meta` says schema version {version}, not {SCHEMA_VERSION}"
        )
