"""A store opened read-only (a start on a disk too full to open it for writing,
timerwheel.store.open_store) and the free space an open for writing needs
(timerwheel.store.disk.reopen_needs_bytes). Real RocksDB in a temp dir; the real full
disk is tests/system/test_disk_full.py."""

from __future__ import annotations

import pytest

from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.disk import REOPEN_SLACK_BYTES, reopen_needs_bytes, wal_bytes
from timerwheel.store.open_store import open_store
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.wheels.domain import StoreUnavailable
from timerwheel.wheels.scheduler import Scheduler

LEADS = (50_000, 300_000)


def new_state():
    return Scheduler.fresh(1_700_000_000_000, LEADS).state


def put(database: RocksDatabase, key: bytes, value: bytes) -> None:
    batch = StagedBatch()
    batch.writes[keys.CF_MESSAGES][key] = value
    database.write(batch.to_write_batch(database.handles))


def test_the_figure_is_the_wal_files_size_two_percent_and_one_mib_more(tmp_path):
    data_dir = tmp_path / "d"
    database = RocksDatabase(str(data_dir), RocksTuning(sync_writes=False))
    try:
        for i in range(50):
            put(database, b"m%03d" % i, bytes(10_000))
        wal = sum(p.stat().st_size for p in data_dir.iterdir() if p.name.endswith(".log"))
        assert wal > 500_000  # every put is still in the WAL: nothing flushed yet
        assert wal_bytes(str(data_dir)) == wal
        assert reopen_needs_bytes(str(data_dir)) == wal + wal * 2 // 100 + REOPEN_SLACK_BYTES
    finally:
        database.close()


def test_a_read_only_store_reads_refuses_writes_and_reopens_for_writing(tmp_path):
    data_dir = str(tmp_path / "d")
    store, _, created = open_store(data_dir, RocksTuning(sync_writes=False), new_state)
    assert created
    put(store.database, b"acked", b"body")  # in the WAL only: no table was written
    store.close()

    database = RocksDatabase(data_dir, RocksTuning(sync_writes=False), read_only=True)
    try:
        assert database.read_only
        assert database.families[keys.CF_MESSAGES].get(b"acked") == b"body"  # WAL replayed
        with pytest.raises(StoreUnavailable):
            put(database, b"refused", b"x")
        database.reopen()
        assert not database.read_only
        put(database, b"after", b"y")
        assert database.families[keys.CF_MESSAGES].get(b"after") == b"y"
        assert database.families[keys.CF_MESSAGES].get(b"acked") == b"body"
    finally:
        database.close()


def test_open_store_opens_read_only_when_the_disk_has_less_than_the_figure(tmp_path, monkeypatch):
    data_dir = str(tmp_path / "d")
    store, state, _ = open_store(data_dir, RocksTuning(sync_writes=False), new_state)
    store.close()
    from timerwheel.store import open_store as module

    needed = reopen_needs_bytes(data_dir)
    monkeypatch.setattr(module, "free_bytes", lambda path: needed - 1)
    store, reopened_state, created = open_store(data_dir, RocksTuning(), new_state)
    try:
        assert store.database.read_only and not created
        assert reopened_state == state
    finally:
        store.close()
    monkeypatch.setattr(module, "free_bytes", lambda path: needed)
    store, _, _ = open_store(data_dir, RocksTuning(), new_state)
    try:
        assert not store.database.read_only
    finally:
        store.close()
