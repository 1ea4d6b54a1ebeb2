"""Fixtures of the store tests that share a set-up: `open_store`, the contract tests'
TimerStore on real RocksDB in the test's temp dir (unsynced writes). Each call opens it
again on the same data (a reopen, where durability is the point); every store opened
is closed at the end."""

from __future__ import annotations

import pytest

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
