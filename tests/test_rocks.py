"""What store.rocks hands RocksDB: the options it persists in the data dir's OPTIONS
file are the ones RocksDB runs with."""

from __future__ import annotations

import configparser
from pathlib import Path

from store.rocks import RocksDatabase, RocksTuning


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
