"""Opening and closing the RocksDB database with every column family, in raw bytes mode.

Memory is bounded by construction, so RSS does not grow with the number of timers:
all memtables share one `db_write_buffer_size` budget, and index/filter blocks are
charged to the one block cache instead of being pinned per open table.
"""

from __future__ import annotations

import gc
import os
from dataclasses import dataclass

import structlog
from rocksdict import (
    AccessType,
    BlockBasedIndexType,
    BlockBasedOptions,
    Cache,
    ColumnFamily,
    DBCompressionType,
    Options,
    Rdict,
    WriteBatch,
    WriteOptions,
)

from timerwheel.store.batch_keys import CF_SEGMENTS
from timerwheel.store.disk import is_disk_full
from timerwheel.store.integrity import check_data_dir
from timerwheel.store.keys import ALL_COLUMN_FAMILIES, CF_COUNTS, CF_MESSAGES, CF_WHEEL
from timerwheel.wheels.domain import StoreUnavailable

log = structlog.get_logger("timerwheel.store")

L0_COMPACTION_TRIGGER = 8  # level-0 files that start a compaction (RocksDB's default: 4)
# Every open rolls RocksDB's info LOG (over 100 KiB: it lists every family's options) to a
# LOG.old file, and RocksDB keeps 1,000 of them: restarts and reopens after a full disk
# would eat the very space a recovery needs.
KEEP_LOG_FILES = 4
# A version-2 family that is tuned as a version-1 one is: a segment is written once at the
# send and read by the fire, as a record is (decision 0014).
_OPTIONS_LIKE = {CF_SEGMENTS: CF_MESSAGES}


@dataclass(frozen=True)
class RocksTuning:
    block_cache_bytes: int = 64 * 1024 * 1024
    write_buffer_bytes: int = 32 * 1024 * 1024
    wheel_write_buffer_bytes: int = 8 * 1024 * 1024
    sync_writes: bool = True


def _options(tuning: RocksTuning, cache: Cache, family: str = "") -> Options:
    """Options for the database (no `family`) or for one column family."""
    family = _OPTIONS_LIKE.get(family, family)
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_max_background_jobs(2)
    options.set_compression_type(DBCompressionType.lz4())
    # Hour- and minute-wheel keys arrive in random time order (sends spread over weeks). A
    # memtable is a skiplist, and random inserts into a large one miss the CPU cache at every
    # level: with 32 MB memtables the RocksDB write was the largest cost of a send; with 8 MB
    # it is about half (docs/engine.md, "Storage layout"). Small memtables flush more often,
    # in background threads. A send due within the minute inserts at random points of the
    # second wheel and of `messages` too (server-made ids begin with the deliver time), three
    # times an in-order insert's cost, yet those two keep the larger size: at 8 MB the sends'
    # inserts cost a third less, and the fire's reads of the records and the flushes took it
    # back (docs/lab-log.md has the runs).
    random_order = family in (CF_WHEEL["hour"], CF_WHEEL["minute"])
    options.set_write_buffer_size(
        tuning.wheel_write_buffer_bytes if random_order else tuning.write_buffer_bytes
    )
    # `messages` keeps a third memtable: it flushes two at once (below).
    options.set_max_write_buffer_number(3 if family == CF_MESSAGES else 2)
    # Compact level 0 into level 1 once it holds 8 files, not RocksDB's 4: every such
    # compaction rewrites the overlapping part of level 1, so half as many of them write
    # about half as much. With `messages`' merged flushes below, the compaction thread
    # takes a third or less of the CPU it took in the same run before (docs/lab-log.md
    # has the runs). Reads look in up to twice as many level-0 files; bloom filters skip
    # most of them for point reads.
    options.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER)
    if family == CF_COUNTS:
        # Counters are rewritten in place: each batch puts a new 8-byte value under keys
        # the memtable mostly holds already (one per topic and minute). Appending a new
        # version each time grows a skiplist that random keys miss the cache in; updating
        # in place keeps it one entry a key (a counter put costs little more than half).
        # RocksDB allows it only without concurrent memtable writes, which one writer
        # thread never uses anyway.
        options.set_inplace_update_support(True)
    if family == CF_MESSAGES:
        # The fire reads records written 3 s to minutes before, no longer in either
        # memtable, yet a read searches both first (a fifth of the fire's read in a
        # profile). A whole-key bloom filter of 10% of the memtable lets the read skip
        # them: a fired record's read costs about a fifth less, the engine a little less
        # in all (docs/engine.md, "Storage layout", on RocksDB options).
        options.set_memtable_prefix_bloom_ratio(0.1)
        options.set_memtable_whole_key_filtering(True)
        # Flush two memtables at once, merged: half as many level-0 files, so the
        # trigger above is reached half as often (and a record fired and acked within
        # the two keeps only its newest version). With both, a burst of 1,000,000 runs
        # no compaction at all (it ran some before; the flushes' CPU is the same). The
        # memtables' shared budget (`db_write_buffer_size`) still bounds their memory.
        options.set_min_write_buffer_number_to_merge(2)
    if not family:
        options.set_allow_concurrent_memtable_write(False)
        options.set_keep_log_file_num(KEEP_LOG_FILES)
    # One memtable budget for all column families together.
    options.set_db_write_buffer_size(tuning.write_buffer_bytes * 3)
    # At this cap RocksDB flushes every column family that keeps the oldest WAL file.
    # A larger cap (512 MB) moved the flush rounds' compactions off a moderate rate's
    # peak, for a shorter tail, but made the tail worse at a high rate with TDMQ's
    # delays: not kept (docs/lab-log.md has the runs).
    options.set_max_total_wal_size(tuning.write_buffer_bytes * 4)
    table = BlockBasedOptions()
    table.set_block_cache(cache)
    table.set_cache_index_and_filter_blocks(True)
    table.set_pin_l0_filter_and_index_blocks_in_cache(True)
    table.set_bloom_filter(10, False)
    # Partitioned index and filters, top level pinned. With one index and one filter
    # block per file, firing slowed about sixfold a record once `messages` had been
    # compacted into a file of a million records (the drain bench's rate turned bimodal):
    # those blocks run to megabytes and compete in the cache with the data blocks the
    # firing reads. Partitioned, only small partitions move, and the drain rate holds.
    table.set_index_type(BlockBasedIndexType.two_level_index_search())
    table.set_partition_filters(True)
    table.set_pin_top_level_index_and_filter(True)
    options.set_block_based_table_factory(table)
    return options


class WalSyncFailed(RuntimeError):
    """A batch was applied (readers see it) but syncing the WAL failed, so whether it
    survives a crash is unknown. RocksDB itself turns read-only after such an error; the
    writer stops too rather than carry on from a state it cannot vouch for."""


class WriteFailed(RuntimeError):
    """RocksDB refused a batch: it is not applied. After such an error RocksDB keeps
    refusing every write ('Writer has previous error') until the database is reopened,
    even once the cause is gone; `disk_full` says whether the cause was ENOSPC."""

    def __init__(self, message: str, disk_full: bool) -> None:
        super().__init__(message)
        self.disk_full = disk_full


class _Families(dict):
    """Column families by name; while the database is closed or being reopened, a look-up
    raises StoreUnavailable (a client sees UNAVAILABLE) rather than a KeyError."""

    def __missing__(self, name: str):
        raise StoreUnavailable(f"the store is being reopened (column family {name!r}); retry")


class RocksDatabase:
    """The open database: column-family objects for reads, handles for batches.

    `families` and `handles` are the same dict objects for the life of this object, so
    whoever looks families up through them (counters, extras, gauges) follows a `reopen`.

    `column_families`: the families of the store's layout; version 1's by default, the
    batch-level layout's for a version-2 store (`timerwheel.store.batch_store`).

    `read_only`: opened for reading only, for a store on a disk too full to open it for
    writing (`timerwheel.store.open_store`): RocksDB replays the WAL into memory and
    writes nothing, so every acknowledged write is read; a write raises
    StoreUnavailable, and `reopen` opens it for writing.
    """

    def __init__(
        self, path: str, tuning: RocksTuning | None = None, *, read_only: bool = False,
        column_families: tuple[str, ...] = ALL_COLUMN_FAMILIES,
    ) -> None:  # fmt: skip
        self.tuning = tuning or RocksTuning()
        self.path = path
        # Before RocksDB's create_if_missing can write anything: a directory of other
        # files, or another program's RocksDB, is refused (timerwheel.store.integrity).
        self.created = check_data_dir(path)
        os.makedirs(path, exist_ok=True)
        self._cache = Cache(self.tuning.block_cache_bytes)
        self.families: dict[str, ColumnFamily | Rdict] = _Families()
        self.handles: dict = _Families()
        # Writes never fsync inside `write`: see `write` for why and how they are synced.
        self._write_options = WriteOptions()
        self._write_options.sync = False
        self.db: Rdict | None = None
        self.read_only = read_only
        self.column_families = column_families
        self._open()

    def _open(self) -> None:
        options = _options(self.tuning, self._cache)
        names = self.column_families
        access = {}
        if self.read_only:  # only families that exist: a read-only open creates none
            present = set(Rdict.list_cf(self.path))
            names = tuple(name for name in self.column_families if name in present)
            access = {"access_type": AccessType.read_only()}
        families = {name: _options(self.tuning, self._cache, name) for name in names}
        db = Rdict(self.path, options=options, column_families=families, **access)
        for name in names:
            self.families[name] = db.get_column_family(name)
            self.handles[name] = db.get_column_family_handle(name)
        self.db = db

    @property
    def closed(self) -> bool:
        return self.db is None

    def write(self, batch: WriteBatch, sync: bool = True) -> None:
        """Apply `batch` atomically; with `sync` and `sync_writes`, return only once it is
        on disk.

        The WAL is always on. A synced write is done as a write followed by `flush_wal(True)`
        (RocksDB's SyncWAL: fsync of every WAL file written so far) rather than
        `WriteOptions.sync`, because rocksdict holds the GIL for the whole of `write`,
        fsync included, while `flush_wal` releases it: producer threads then validate and
        encode the next sends during the fsync instead of waiting on it. The writer is the
        only thread that writes, so when `flush_wal` returns this batch is durable.

        Unlike a sync write, the batch is visible to readers just before it is durable,
        and a failed sync leaves it applied: that raises `WalSyncFailed`, not a plain
        error, because the caller must not assume the batch is absent. A refused write
        raises `WriteFailed`: the batch is not applied.

        `sync=False` writes the WAL without an fsync: the batch survives the death of the
        process (the WAL is in the kernel's page cache) but not a machine crash until the
        next synced write, which syncs every WAL byte before its own. A machine crash
        loses a suffix of such writes, never a middle: RocksDB recovers a prefix of the WAL.
        """
        if self.db is None or self.read_only:
            raise StoreUnavailable("the store is being reopened; retry")
        try:
            self.db.write(batch, write_opt=self._write_options)
        except Exception as exc:
            raise WriteFailed(f"RocksDB refused a write: {exc}", is_disk_full(exc)) from exc
        if sync:
            self.sync_wal()

    def sync_wal(self) -> None:
        """fsync every WAL byte written so far (with `sync_writes`; else nothing). Safe
        while another thread writes: RocksDB's SyncWAL syncs what was appended before it
        and lets later appends proceed. Releases the GIL (rocksdict's `flush_wal`)."""
        if not self.tuning.sync_writes:
            return
        db = self.db
        if db is None or self.read_only:
            raise StoreUnavailable("the store is being reopened; retry")
        try:
            db.flush_wal(True)
        except Exception as exc:
            raise WalSyncFailed(f"syncing the WAL failed after a write: {exc}") from exc

    def reopen(self) -> None:
        """Close and open again, in this process: RocksDB's way out of the read-only state
        a failed write leaves it in (rocksdict has no `Resume`). The caller must have
        dropped its own column-family objects; a reader still holding one keeps the LOCK,
        and then the open fails and may be retried. On failure the database stays closed
        (reads get StoreUnavailable) and `reopen` may be called again. A read-only
        database is reopened for writing."""
        self.close()
        self.read_only = False
        self._open()

    def close(self) -> None:
        """Close and release the LOCK so the same process may reopen the directory.

        rocksdict keeps the LOCK while any column-family object or handle is alive, so
        they are dropped (and collected) before `close`. Never raises for a database a
        write failed on: RocksDB's close then reports that error again ('Writer has
        previous error'), yet it does close and release the LOCK, and what was
        acknowledged is already in the WAL; a shutdown on a full disk must stay clean.
        """
        db, self.db = self.db, None
        if db is None:
            return
        self.families.clear()
        self.handles.clear()
        gc.collect()
        try:
            db.close()
        except Exception as exc:
            log.warning("store_close_error", data_dir=self.path, error=str(exc))
