"""Opening a store: the one path from a data dir to a `TimerStore` and its scheduler state.

The rules of what may be opened are `timerwheel.store.integrity`'s. Here they are applied in order:
the directory is checked before RocksDB creates anything, the families once it is open,
and `meta` last. A new store gets its first scheduler state written at once, so a store
that exists always has a whole `meta`: a later open that finds data without one knows
the store was damaged, not merely never used. Any refusal closes the database first (it
releases RocksDB's LOCK), then raises.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from timerwheel.store.batch import StagedBatch
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.scheduler import SchedulerState

log = structlog.get_logger("timerwheel.store")


def open_store(
    data_dir: str, tuning: RocksTuning, new_state: Callable[[], SchedulerState]
) -> tuple[TimerStore, SchedulerState, bool]:
    """The store in `data_dir`, its persisted scheduler state, and whether it was just
    created. A new store (missing or empty directory, or a store never written) is
    created with `new_state()` and logged as `store_created`; a refusal raises
    `timerwheel.store.integrity.StoreRefused`."""
    database = RocksDatabase(data_dir, tuning)
    store = None
    try:
        store = TimerStore(database)
        state = store.load_state()
        created = state is None
        if state is None:
            state = new_state()
            batch = StagedBatch()
            store.stage_state(batch, state)
            store.commit(batch)
            log.info(
                "store_created", data_dir=data_dir, new_directory=database.created,
                now_ms=state.now_ms,
            )  # fmt: skip
    except BaseException:
        # The store's column-family objects would keep the LOCK: it drops them first.
        (store or database).close()
        raise
    return store, state, created
