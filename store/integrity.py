"""Is this directory a timerwheel store, a new one, or something to leave alone?

Opening a store decides between three cases, and only one of them creates anything:

- **new**: the directory does not exist, or is empty (a `lost+found` alone counts as
  empty: a freshly mounted volume). RocksDB creates the database and `open_store` writes
  the scheduler's first state into `meta` at once, so from then on the store is "used".
- **a timerwheel store**: a RocksDB database (a `CURRENT` file) whose column families
  are timerwheel's, and whose `meta` holds every key of the scheduler state, decodable
  and of a schema version this code reads. A store whose families are all empty (it was
  created and never written) is new again.
- **anything else is refused** before RocksDB writes a byte there (`create_if_missing`
  would happily make a database inside a home folder): a directory of other files
  (`NotAStore`), a RocksDB database that is not timerwheel's (`NotAStore`), or a
  timerwheel store that holds data but whose `meta` is missing or damaged
  (`StoreDamaged`). Starting such a store afresh would restart fire sequences at 0,
  whose `ready` keys would overwrite un-acked fired messages, and put the cascade
  horizons where timers already wait: it must be restored, not guessed at.

Every refusal is one line that names the data dir, what is wrong and what to do, and
no refusal changes a byte of the data dir: `check_data_dir` only lists it, and
`check_store_read_only` reads `meta` without opening the store for writing (an open for
writing rewrites RocksDB's LOG, MANIFEST, OPTIONS and WAL even when nothing is put).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from itertools import islice

import structlog
from rocksdict import AccessType, Options, Rdict

from timerwheel.store import batch_keys, keys
from timerwheel.store.upgrade import upgradable
from timerwheel.wheels.scheduler import CascadeState, SchedulerState, TimerKey
from timerwheel.wheels.wheel import LEVELS

log = structlog.get_logger("timerwheel.store")

# Families every timerwheel store has had since the first release; later ones (extras,
# counts, trace) are created when an older store is opened, so they are not required.
REQUIRED_FAMILIES = (
    keys.CF_MESSAGES, *keys.CF_WHEEL.values(), keys.CF_READY, keys.CF_META,
)  # fmt: skip
# A version-2 store (decision 0014, `timerwheel.store.batch_store`) has families of its own;
# its `meta` says which layout it is, and `decode_state` refuses it to a version-1 open.
BATCH_REQUIRED_FAMILIES = (batch_keys.CF_SEGMENTS, *keys.CF_WHEEL.values(), keys.CF_META)
KNOWN_FAMILIES = frozenset(
    {"default", *keys.ALL_COLUMN_FAMILIES, *batch_keys.PLANNED_COLUMN_FAMILIES}
)
IGNORED_ENTRIES = frozenset({"lost+found"})  # the root of a fresh ext4 volume has it
_RESTORE = "restore the data dir from a backup, or move it aside to start an empty store"


class StoreRefused(RuntimeError):
    """The data dir cannot be opened as a timerwheel store; the message says why and
    what to do, in one line (`timerwheel serve` prints it as its failure)."""


class NotAStore(StoreRefused):
    """The data dir holds something other than a timerwheel store."""


class StoreDamaged(StoreRefused):
    """A timerwheel store holds data but its `meta` is missing, damaged or too new."""


def check_data_dir(path: str) -> bool:
    """Before opening: True when `path` is new (missing or empty), False when it is a
    RocksDB database of timerwheel's column families; else `NotAStore`. Reads only:
    nothing is created, so a refused directory is left exactly as it was."""
    if not os.path.exists(path):
        return True
    if not os.path.isdir(path):
        raise NotAStore(f"data dir {path!r} is a file, not a directory; give a directory")
    entries = sorted(set(os.listdir(path)) - IGNORED_ENTRIES)
    if not entries:
        return True
    if not os.path.isfile(os.path.join(path, "CURRENT")):
        shown = ", ".join(repr(e) for e in entries[:3]) + (", ..." if len(entries) > 3 else "")
        raise NotAStore(
            f"data dir {path!r} is not a timerwheel store: it holds {len(entries)} "
            f"entries ({shown}) and no RocksDB database; give the store's --data-dir, "
            "or an empty or new directory for a new store"
        )
    try:
        families = set(Rdict.list_cf(path))
    except Exception as exc:
        raise NotAStore(
            f"data dir {path!r} has a RocksDB CURRENT file but its column families cannot "
            f"be read ({exc}); it is not a usable timerwheel store: {_RESTORE}"
        ) from exc
    missing = [f for f in REQUIRED_FAMILIES if f not in families]
    if missing and families.issuperset(BATCH_REQUIRED_FAMILIES):
        missing = []  # a version-2 store
    foreign = sorted(families - KNOWN_FAMILIES)
    if missing or foreign:
        raise NotAStore(
            f"data dir {path!r} is a RocksDB database but not a timerwheel store (column "
            f"families {', '.join(sorted(families))}; missing {', '.join(missing) or '-'}, "
            f"foreign {', '.join(foreign) or '-'}); give the store's --data-dir, or an "
            "empty or new directory for a new store"
        )
    return False


def is_empty(families: dict) -> bool:
    """True when the store holds nothing but what opening it writes: it was never used.

    `meta` is looked at first: every used store has scheduler keys there, so the usual
    answer costs one seek, not a walk over the tombstones that may open another family.
    A store that an earlier timerwheel opened and closed without a send holds only the
    `counts.built` marker (it wrote no scheduler state before its first commit): that is
    still a new store, not a damaged one."""
    meta_keys = list(islice(families[keys.CF_META].keys(), 2))
    if meta_keys not in ([], [keys.META_COUNTS_BUILT]):
        return False
    others = (name for name in families if name != keys.CF_META)
    return all(next(iter(families[name].keys()), None) is None for name in others)


def decode_state(path: str, meta, upgrading: bool = False) -> SchedulerState:
    """The scheduler state in `meta` (a store that holds data), or `StoreDamaged` naming
    every missing or undecodable key. `upgrading`: the store is about to be opened for
    writing, which upgrades an older layout that `timerwheel.store.upgrade` has steps
    for, so such a version passes too; every other reader wants this code's."""
    problems: list[str] = []

    def u64(key: bytes) -> int:
        raw = meta.get(key)
        if raw is None:
            problems.append(f"{key.decode()} missing")
        elif len(raw) != keys.TIME_BYTES:
            problems.append(f"{key.decode()} undecodable ({len(raw)} bytes, expected 8)")
        else:
            return keys.decode_u64(raw)
        return 0

    def timer_key(key: bytes, required: bool = True) -> TimerKey | None:
        raw = meta.get(key)
        if raw is None:
            if required:
                problems.append(f"{key.decode()} missing")
            return None
        try:
            if len(raw) < keys.TIME_BYTES:
                raise ValueError(f"{len(raw)} bytes, expected 8 or more")
            return keys.decode_timer_key(raw)
        except (ValueError, UnicodeError) as exc:
            problems.append(f"{key.decode()} undecodable ({exc})")
            return None

    version = u64(keys.META_SCHEMA_VERSION)
    if not problems and version != keys.SCHEMA_VERSION and not (upgrading and upgradable(version)):
        raise StoreDamaged(
            f"data dir {path!r} has store schema version {version}, and this timerwheel "
            f"reads version {keys.SCHEMA_VERSION}: run the timerwheel that wrote it, or "
            f"{_RESTORE}"
        )
    now_ms = u64(keys.META_NOW_MS)
    fire_seq = u64(keys.META_FIRE_SEQ)
    fire_from = timer_key(keys.META_FIRE_FROM)
    cascades = []
    for lower in LEVELS[:-1]:
        horizon_ms = u64(keys.meta_horizon(lower.name))
        cascades.append(CascadeState(horizon_ms, timer_key(keys.meta_pending(lower.name), False)))
    if problems:
        raise StoreDamaged(
            f"data dir {path!r} is a damaged timerwheel store: it holds data but its meta "
            f"is not whole ({'; '.join(problems)}); starting it afresh could fire timers "
            f"twice or overwrite fired ones, so it is not opened: {_RESTORE}"
        )
    return SchedulerState(now_ms, tuple(cascades), fire_from, fire_seq)


def check_meta(database) -> None:
    """`StoreDamaged` unless the open `database` is empty or has a whole `meta` (for
    readers that open a stopped store without a scheduler, such as `export --data-dir`)."""
    if not is_empty(database.families):
        decode_state(database.path, database.families[keys.CF_META])


# What a read-only view of a store leaves out: RocksDB's info log (a read-only open
# rolls it) and its LOCK (never taken read-only), and rocksdict's config file (rewritten
# by every open, whatever its access type).
_NOT_VIEWED = ("LOG", "LOCK", "rocksdict-config.json")


def check_store_read_only(path: str) -> None:
    """`StoreDamaged` when the used store at `path` (one `check_data_dir` said is a
    timerwheel store) is neither empty nor holding a whole `meta`; checked before it is
    opened for writing, so a refusal leaves every file of it as it was.

    RocksDB opens it read-only through a view: a temporary directory of symbolic links
    to its files, without the ones an open would write (`_NOT_VIEWED`). A read-only open
    replays the WAL into memory and writes nothing to the database's files; its own LOG
    and rocksdict's config file land in the view, which is removed afterwards. When the
    view cannot be opened (a live server compacting it away under the links, say), this
    says nothing: the open for writing that follows applies the same rules."""
    view = tempfile.mkdtemp(prefix="timerwheel-check-")
    try:
        for name in os.listdir(path):
            if not name.startswith(_NOT_VIEWED):
                os.symlink(os.path.join(os.path.abspath(path), name), os.path.join(view, name))
        try:
            names = Rdict.list_cf(view)
            database = Rdict(
                view, options=Options(raw_mode=True),
                column_families={name: Options(raw_mode=True) for name in names},
                access_type=AccessType.read_only(),
            )  # fmt: skip
        except Exception as exc:
            log.info("store_read_only_check_skipped", data_dir=path, error=str(exc))
            return
        families: dict = {}
        try:
            families.update((name, database.get_column_family(name)) for name in names)
            if not is_empty(families):
                decode_state(path, families[keys.CF_META], upgrading=True)
        finally:
            families.clear()  # the column families first: they hold the database open
            database.close()
    finally:
        shutil.rmtree(view, ignore_errors=True)
