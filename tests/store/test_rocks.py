"""What timerwheel.store.rocks hands RocksDB: the options it persists in the data dir's OPTIONS
file are the ones RocksDB runs with; how a failed WAL sync is reported."""

from __future__ import annotations

import configparser
from pathlib import Path

import pytest
from helpers.wal_sync_child import FailingSync
from rocksdict import WriteBatch

from timerwheel.store.keys import ALL_COLUMN_FAMILIES
from timerwheel.store.rocks import RocksDatabase, RocksTuning, WalSyncFailed


def _persisted_options(data_dir: Path) -> configparser.ConfigParser:
    """The newest OPTIONS-<n> file RocksDB wrote (an INI file)."""
    newest = max(data_dir.glob("OPTIONS-*"), key=lambda p: int(p.name.split("-")[1]))
    options = configparser.ConfigParser(strict=False, interpolation=None)
    options.read(newest)
    return options


def test_the_wal_cap_and_the_memtable_budget_follow_the_write_buffer(tmp_path):
    tuning = RocksTuning(sync_writes=False, write_buffer_bytes=4 * 1024 * 1024)
    RocksDatabase(str(tmp_path), tuning).close()
    db = _persisted_options(tmp_path)["DBOptions"]
    assert int(db["max_total_wal_size"]) == 4 * tuning.write_buffer_bytes
    assert int(db["db_write_buffer_size"]) == 3 * tuning.write_buffer_bytes


def test_only_messages_filters_its_memtables_by_whole_key(tmp_path):
    RocksDatabase(str(tmp_path), RocksTuning(sync_writes=False)).close()
    persisted = _persisted_options(tmp_path)
    messages = persisted['CFOptions "messages"']
    assert messages["memtable_whole_key_filtering"] == "true"
    assert float(messages["memtable_prefix_bloom_size_ratio"]) == 0.1
    for family in ("wheel_second", "ready", "meta"):  # the filter is for the fire's reads
        options = persisted[f'CFOptions "{family}"']
        assert float(options["memtable_prefix_bloom_size_ratio"]) == 0.0


def test_level_0_compacts_at_eight_files_and_messages_flushes_two_memtables_merged(tmp_path):
    RocksDatabase(str(tmp_path), RocksTuning(sync_writes=False)).close()
    persisted = _persisted_options(tmp_path)
    families = [name for name in persisted.sections() if name.startswith("CFOptions")]
    assert len(families) == len(ALL_COLUMN_FAMILIES) + 1  # and RocksDB's "default"
    for name in families:
        assert int(persisted[name]["level0_file_num_compaction_trigger"]) == 8
        merged = name == 'CFOptions "messages"'  # records are rewritten at fire and ack
        assert int(persisted[name]["min_write_buffer_number_to_merge"]) == (2 if merged else 1)
        assert int(persisted[name]["max_write_buffer_number"]) == (3 if merged else 2)


def test_a_failed_wal_sync_says_so_and_leaves_the_write_applied(tmp_path):
    database = RocksDatabase(str(tmp_path), RocksTuning(sync_writes=True))
    family = database.families["meta"]
    try:
        database.db = FailingSync(database.db, allowed=0)
        batch = WriteBatch(raw_mode=True)
        batch.put(b"k", b"v", database.handles["meta"])
        with pytest.raises(WalSyncFailed, match="fsync of the WAL failed"):
            database.write(batch)  # a synced write: the write, then sync_wal
        with pytest.raises(WalSyncFailed):
            database.sync_wal()  # on its own, as the WAL syncer's thread calls it
        assert family[b"k"] == b"v"  # applied: the caller must not assume it is absent
    finally:
        database.db = database.db.inner
        del family
        database.close()


def test_without_sync_writes_sync_wal_does_nothing(tmp_path):
    database = RocksDatabase(str(tmp_path), RocksTuning(sync_writes=False))
    try:
        database.db = FailingSync(database.db, allowed=0)
        database.sync_wal()  # would raise had it called flush_wal
    finally:
        database.db = database.db.inner
        database.close()
