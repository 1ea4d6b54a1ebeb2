"""Fixtures of the store tests that share a set-up: `open_store`, the contract tests'
TimerStore on real RocksDB in the test's temp dir (unsynced writes). Each call opens it
again on the same data (a reopen, where durability is the point); every store opened
is closed at the end. `v1`: a fresh copy of the store the version-1 layout wrote
(`tests/fixtures/make_store_v1.py`), which both upgrades open."""

from __future__ import annotations

import json
import tarfile

import pytest
from helpers.timer_store import V1_FIXTURE

from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.timer_store import TimerStore


@pytest.fixture
def open_store(tmp_path):
    opened = []

    def _open() -> TimerStore:
        store = TimerStore(RocksDatabase(str(tmp_path / "db"), RocksTuning(sync_writes=False)))
        opened.append(store)
        return store

    yield _open
    for store in opened:
        if hasattr(store, "_messages"):
            store.close()


@pytest.fixture
def v1(tmp_path):
    """(data dir, what the v1 code said of it) of a fresh copy of the v1 store."""
    with tarfile.open(V1_FIXTURE) as archive:
        archive.extractall(tmp_path, filter="data")
    expected = json.loads((tmp_path / "expected.json").read_text())
    assert expected["schema_version"] == 1
    return tmp_path / "data", expected
