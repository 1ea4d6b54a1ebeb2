"""Opening a store: the one path from a data dir to a `TimerStore` and its scheduler state.

The rules of what may be opened are `timerwheel.store.integrity`'s. Here they are applied in order,
all before RocksDB opens the store for writing (which rewrites its LOG and MANIFEST even
when nothing is put), so a refused start changes no byte of the data dir: the directory
and the families are listed, then `meta` is read through a read-only open. A store of an
older layout is upgraded right after the open for writing, in one atomic batch
(`timerwheel.store.upgrade`). The open for writing checks `meta` again (its WAL could
have been replayed differently by a server that wrote in between). A new store gets its
first scheduler state written at once, so a store that exists always has a whole `meta`:
a later open that finds data without one knows the store was damaged, not merely never
used. Any refusal closes the database first (it releases RocksDB's LOCK), then raises.

A used store on a disk with less free space than an open for writing needs
(`timerwheel.store.disk.reopen_needs_bytes`), or whose open for writing fails on ENOSPC,
is opened read-only instead (logged as `store_opened_read_only`): the server comes up
serving reads and refusing writes, and its writer reopens the store for writing once
the space is there, as after a disk that filled while it ran. Exiting instead would make
an orchestrator restart it in a loop that frees nothing.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from timerwheel.store.batch import StagedBatch
from timerwheel.store.disk import free_bytes, is_disk_full, mib, reopen_needs_bytes
from timerwheel.store.integrity import check_data_dir, check_store_read_only
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.timer_store import TimerStore
from timerwheel.store.upgrade import upgrade_on_open
from timerwheel.wheels.scheduler import SchedulerState

log = structlog.get_logger("timerwheel.store")


def open_store(
    data_dir: str, tuning: RocksTuning, new_state: Callable[[], SchedulerState]
) -> tuple[TimerStore, SchedulerState, bool]:
    """The store in `data_dir`, its persisted scheduler state, and whether it was just
    created. A new store (missing or empty directory, or a store never written) is
    created with `new_state()` and logged as `store_created`; a refusal raises
    `timerwheel.store.integrity.StoreRefused`."""
    new = check_data_dir(data_dir)
    if not new:  # a used store: its meta is read before any write
        check_store_read_only(data_dir)
    database = _open_database(data_dir, tuning, new)
    store = None
    try:
        store = TimerStore(database)
        upgrade_on_open(store)  # an older layout's store, in one atomic batch
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


def _open_database(data_dir: str, tuning: RocksTuning, new: bool) -> RocksDatabase:
    """Open for writing, or read-only when a used store's disk is too full for that."""
    if not new:
        free, needed = free_bytes(data_dir), reopen_needs_bytes(data_dir)
        if free is not None and free < needed:
            return _read_only(data_dir, tuning, free, needed, "")
    try:
        return RocksDatabase(data_dir, tuning)
    except Exception as exc:
        if new or not is_disk_full(exc):
            raise
        return _read_only(
            data_dir, tuning, free_bytes(data_dir), reopen_needs_bytes(data_dir), str(exc)
        )


def _read_only(
    data_dir: str, tuning: RocksTuning, free: int | None, needed: int, error: str
) -> RocksDatabase:
    log.warning(
        "store_opened_read_only", data_dir=data_dir, free_bytes=free, needed_bytes=needed,
        error=error or f"{mib(free)} free; an open for writing needs {mib(needed)}",
    )  # fmt: skip
    return RocksDatabase(data_dir, tuning, read_only=True)
