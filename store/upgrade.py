"""Upgrading a store written by an earlier layout, when it is opened for writing.

`keys.SCHEMA_VERSION` is the layout this code reads and writes; `meta` holds the one a
store was written in. A store of an older version that has a chain of steps below up to
this one is upgraded on open (`upgrade_on_open`, from `timerwheel.store.open_store`,
before the scheduler state is read): every step's rewrites and `meta`'s new
`schema_version` go into one WriteBatch, written with an fsync, so either the whole
upgrade is on disk or none of it is, and a step that raises (a record it cannot read)
leaves every byte as it was and refuses the start. A version newer than this code's, or
an older one with no step, is refused by `timerwheel.store.integrity.decode_state`
before anything is opened for writing, as it always was.

====  ====  ==============================================================================
from  to    what the step rewrites
====  ====  ==============================================================================
(no step yet: every store is version 1, the layout of `timerwheel.store.keys`)
====  ====  ==============================================================================

Adding a version: bump `keys.SCHEMA_VERSION`; write the step as a function of
`(view, batch)` that stages its rewrites into `batch` and reads the store through `view`
(what the steps before it left, staged writes over the committed ones); add it to
`STEPS` under the version it upgrades from, and a row above; update the layout tables
(`keys`, `records`, docs/engine.md); and commit a store made by the old layout with the
script that made it (`tests/fixtures/make_store_v1.py` is the model), opened and checked
by `tests/store/test_store_upgrade.py`. A step never reads the clock or the scheduler:
it turns bytes of one layout into bytes of the next, whatever the store holds.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterator
from operator import itemgetter

import structlog

from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch

log = structlog.get_logger("timerwheel.store")

_FIRST = itemgetter(0)


class UpgradeView:
    """The store as the steps so far leave it: `batch`'s staged writes over the
    committed `families` (a staged None is a delete)."""

    def __init__(self, families: dict, batch: StagedBatch) -> None:
        self._families = families
        self._batch = batch

    def get(self, family: str, key: bytes) -> bytes | None:
        staged = self._batch.writes[family]
        if key in staged:
            return staged[key]
        return self._families[family].get(key)

    def items(self, family: str) -> Iterator[tuple[bytes, bytes]]:
        """Every entry of `family` in key order, staged writes applied."""
        staged = self._batch.writes[family]
        committed = (
            (key, value) for key, value in self._families[family].items() if key not in staged
        )
        changed = ((key, staged[key]) for key in sorted(staged) if staged[key] is not None)
        return heapq.merge(committed, changed, key=_FIRST)


Step = Callable[[UpgradeView, StagedBatch], None]

# {version upgraded from: the step to the next version}
STEPS: dict[int, Step] = {}


def upgradable(version: int) -> bool:
    """A store of `version` can be upgraded to `keys.SCHEMA_VERSION` by `STEPS`."""
    return version < keys.SCHEMA_VERSION and all(
        step in STEPS for step in range(version, keys.SCHEMA_VERSION)
    )


def upgrade_on_open(store) -> int:
    """Upgrade the open `store` (a `TimerStore`, opened for writing) to this code's
    layout when its `meta` says an older one; returns the version it was in (this code's
    when there was nothing to do, or the store is new). Raises `StoreRefused` for a
    store opened read-only that needs an upgrade: nothing can be written to it yet."""
    from timerwheel.store.integrity import StoreRefused, is_empty

    families = store.database.families
    raw = families[keys.CF_META].get(keys.META_SCHEMA_VERSION)
    if raw is None or is_empty(families):
        return keys.SCHEMA_VERSION  # new, or damaged: `load_state` says which
    version = keys.decode_u64(raw)
    if version == keys.SCHEMA_VERSION or not upgradable(version):
        return version  # refused by `load_state` when it is not this code's
    if store.database.read_only:
        raise StoreRefused(
            f"data dir {store.database.path!r} is a store of schema version {version}, "
            f"which this timerwheel upgrades to {keys.SCHEMA_VERSION} when it opens it for "
            "writing; it was opened read-only (its disk is nearly full): free space first"
        )
    batch = StagedBatch()
    view = UpgradeView(families, batch)
    for step_from in range(version, keys.SCHEMA_VERSION):
        STEPS[step_from](view, batch)
    batch.writes[keys.CF_META][keys.META_SCHEMA_VERSION] = keys.encode_u64(keys.SCHEMA_VERSION)
    store.commit(batch, sync=True)
    log.info(
        "store_upgraded", data_dir=store.database.path, from_version=version,
        to_version=keys.SCHEMA_VERSION, entries=sum(map(len, batch.writes.values())),
    )  # fmt: skip
    return version
