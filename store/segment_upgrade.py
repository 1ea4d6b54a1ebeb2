"""The upgrade of a version-1 store to the batch-level layout (decision 0014, step 5).

`timerwheel.store.batch_store.open_batch_store` runs it on a version-1 data dir. Unlike
`timerwheel.store.upgrade`'s one atomic batch, it moves the store in bounded batches
(`batch_messages` version-1 entries a commit, each with the `meta` progress marker), so
a store of millions of timers is upgraded in memory of one batch, and a crash at any
point resumes at the next open: a batch deletes the version-1 entries it moved in the
same commit as their version-2 entries and the marker, so nothing is moved twice or
missed.

The version-1 sources are walked in this order, one phase each, the marker holding the
phase and the last key moved:

=============  ==================================================================
phase          what it moves (`timerwheel.store.segment_upgrade_pack` packs them)
=============  ==================================================================
ready          FIRED records, by their `ready` entries (topic and fire order); the
               fire cursor ends at the latest place among them
wheel_*        SCHEDULED records in each wheel; a series goes to `series`
expiry         ACKED and CANCELLED records, with their expiry time
messages       any record no entry above moved (a store left inconsistent: no entry,
               or one its record's state disagrees with): by its state, the wheel
               its send placed it in, expiry after `retention_ms`; a FIRED one after
               the cursor is placed again (it has no `ready` entry to be fetched by)
extras         `extras` of each moved message, keyed by (segment, index)
trace          `trace` events, keyed by (segment, index, trace seq)
finish         version-1 `meta` keys dropped, the schema version set to 2
=============  ==================================================================

The families both layouts have hold both kinds of key while the upgrade runs, told apart
by their bytes: a version-2 wheel or expiry key is (time, segment seq), whose seq starts
with zero bytes (40-bit seqs) where a version-1 key has an id (never 0x00); a
version-2 `extras` or `trace` key starts with 0x00, a version-1 one with an id; a
version-2 `ready` chunk seq is above the version-1 fire seq (`meta` fire.seq). The
counters are cleared in the first batch and counted again from what is placed in a
wheel. The `messages` family is dropped once the version is 2.

A recurring series has no home in version 2 yet (its occurrences do: they are messages):
its record is kept as it was in a family of its own, `series` (key: its id), its extras
under id + 0x00 + ``extras`` and its trace under id + 0x00 + ``trace`` + seq, as decision
0014's table says ("kept as today's per-message records in a family of their own"). The
engine's version-2 series must read them from there. Extras or trace events whose message
is gone (none should be) are deleted and counted in the `store_upgraded_v2` log line.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from typing import Any

import structlog

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.counts import PendingCounts
from timerwheel.store.rocks import RocksDatabase
from timerwheel.store.segment_upgrade_pack import PackState, Row, stage_rows
from timerwheel.store.timer_reads import TimerReads

log = structlog.get_logger("timerwheel.store")

META_UPGRADING = b"upgrade.v2"  # phase index (1 B) + the last key moved; absent: done
META_V1_FIRE_SEQ = b"upgrade.v2.fire_seq"  # v1 ready seqs are at most this
BATCH_MESSAGES = 4096
PHASES = ("ready", "wheel_second", "wheel_minute", "wheel_hour", "expiry", "messages",
          "extras", "trace", "finish")  # fmt: skip
_V1_META = (
    keys.META_NOW_MS, keys.META_FIRE_FROM, keys.META_FIRE_SEQ,
    *(f(w) for w in ("second", "minute") for f in (keys.meta_horizon, keys.meta_pending)),
)  # fmt: skip
UPGRADE_FAMILIES = (*bk.PLANNED_COLUMN_FAMILIES, keys.CF_MESSAGES)
# The record states each phase moves; a record in another is left to `messages`.
_WHEEL_STATES = frozenset({State.SCHEDULED})
_SOURCE_STATES = {
    "ready": frozenset({State.FIRED}), "wheel_second": _WHEEL_STATES,
    "wheel_minute": _WHEEL_STATES, "wheel_hour": _WHEEL_STATES,
    "expiry": frozenset({State.ACKED, State.CANCELLED}), "messages": frozenset(State),
}  # fmt: skip


def needs_upgrade(families: Any) -> bool:
    """The open store (with `messages`) is a version-1 store or one mid-upgrade."""
    meta = families[keys.CF_META]
    raw = meta.get(keys.META_SCHEMA_VERSION)
    return meta.get(META_UPGRADING) is not None or (raw is not None and keys.decode_u64(raw) == 1)


def upgrade_v1(
    database: RocksDatabase, *, segment_max: int, retention_ms: int,
    randbytes: Callable[[int], bytes] = os.urandom, batch_messages: int = BATCH_MESSAGES,
) -> int:  # fmt: skip
    """Move the version-1 store open in `database` (with the families of
    `UPGRADE_FAMILIES`) to version 2, resuming where a marker says; the batches written."""
    if batch_messages < 1:
        raise ValueError(f"batch_messages must be at least 1, not {batch_messages}")
    families = database.families
    meta = families[keys.CF_META]
    written = 0
    if meta.get(META_UPGRADING) is None:
        _start(database)
        written += 1
    counts = PendingCounts(database)
    orphans = 0
    while True:
        marker = families[keys.CF_META][META_UPGRADING]
        phase, after = PHASES[marker[0]], marker[1:]
        batch = StagedBatch(writes={f: {} for f in UPGRADE_FAMILIES})
        if phase == "finish":
            _finish(batch)
            database.write(batch.to_write_batch(database.handles))
            written += 1
            break
        state = _pack_state(families, segment_max, retention_ms, randbytes)
        last, lost = _phase(families, batch, phase, after, batch_messages, state)
        orphans += lost
        if last is None:
            marker = bytes([PHASES.index(phase) + 1])
        else:
            marker = bytes([PHASES.index(phase)]) + last
        writes = batch.writes[keys.CF_META]
        writes[META_UPGRADING] = marker
        writes[bk.META_SEGMENT_SEQ] = keys.encode_u64(state.segment_seq)
        writes[bk.META_CHUNK_SEQ] = keys.encode_u64(state.chunk_seq)
        writes[keys.META_TRACE_SEQ] = keys.encode_u64(state.trace_seq)
        if state.cursor[0] >= 0:
            writes[bk.META_FIRE_CURSOR] = be.cursor_value(*state.cursor)
        changes = counts.stage(batch)
        database.write(batch.to_write_batch(database.handles))
        counts.committed(changes)
        written += 1
    drop_messages(database)
    log.info("store_upgraded_v2", data_dir=database.path, batches=written, orphans=orphans)
    return written


def drop_messages(database: RocksDatabase) -> None:
    """Drop the version-1 `messages` family of a store whose version is 2."""
    db = database.db
    if db is None or keys.CF_MESSAGES not in database.families:
        return
    del database.families[keys.CF_MESSAGES]
    del database.handles[keys.CF_MESSAGES]
    gc.collect()
    db.drop_column_family(keys.CF_MESSAGES)


def _start(database: RocksDatabase) -> None:
    """The first batch: the marker, the counters cleared (counted again as moved)."""
    families = database.families
    meta = families[keys.CF_META]
    batch = StagedBatch(writes={f: {} for f in UPGRADE_FAMILIES})
    counts = batch.writes[keys.CF_COUNTS]
    for key, _ in _items(families[keys.CF_COUNTS], b"", None):
        counts[key] = None
    raw = meta.get(keys.META_FIRE_SEQ)
    fire_seq = 0 if raw is None else keys.decode_u64(raw)
    writes = batch.writes[keys.CF_META]
    writes.update({
        META_UPGRADING: bytes([0]), META_V1_FIRE_SEQ: keys.encode_u64(fire_seq),
        bk.META_CHUNK_SEQ: keys.encode_u64(fire_seq), keys.META_COUNTS_BUILT: keys.encode_u64(1),
        bk.META_SEGMENT_SEQ: keys.encode_u64(0),
    })  # fmt: skip
    database.write(batch.to_write_batch(database.handles))


def _finish(batch: StagedBatch) -> None:
    writes = batch.writes[keys.CF_META]
    for key in (*_V1_META, META_UPGRADING, META_V1_FIRE_SEQ):
        writes[key] = None
    writes[keys.META_SCHEMA_VERSION] = keys.encode_u64(bk.PLANNED_SCHEMA_VERSION)


def _pack_state(
    families: Any, segment_max: int, retention_ms: int, randbytes: Callable[[int], bytes]
) -> PackState:
    meta = families[keys.CF_META]

    def u64(key: bytes) -> int:
        raw = meta.get(key)
        return 0 if raw is None else keys.decode_u64(raw)

    raw = meta.get(bk.META_FIRE_CURSOR)
    cursor = (-1, 0, 0) if raw is None else be.decode_cursor(raw)
    return PackState(
        u64(bk.META_SEGMENT_SEQ), u64(bk.META_CHUNK_SEQ), cursor, u64(keys.META_NOW_MS),
        u64(keys.META_TRACE_SEQ), retention_ms, segment_max, randbytes,
    )  # fmt: skip


def _phase(
    families: Any, batch: StagedBatch, phase: str, after: bytes, limit: int, state: PackState
) -> tuple[bytes | None, int]:
    """Move at most `limit` entries of `phase` after key `after` (b"": from the first);
    (the last key moved, or None when the phase is done; entries of no message dropped)."""
    writes = batch.writes
    start = after + b"\x00" if after else b""
    rows: list[Row] = []
    last, lost = None, 0
    if phase in ("extras", "trace"):
        source = families[phase]
        for key, value in _items(source, start or b"\x01", None, limit):
            last = key
            writes[phase][key] = None
            lost += _rekey(families, writes, phase, key, value)
        return last, lost
    family = phase  # the phases before `extras` are named after the family they walk
    if phase == "ready":
        v1_fire_seq = keys.decode_u64(families[keys.CF_META][META_V1_FIRE_SEQ])
    messages = families[keys.CF_MESSAGES]
    taken = 0
    for key, value in _items(families[family], start, None):
        if taken >= limit:
            break
        last = key
        if phase == "ready":
            if bk.chunk_seq(key) > v1_fire_seq:
                continue
            ids = [value]
        elif phase.startswith("wheel_"):
            if key[keys.TIME_BYTES] == 0:
                continue  # a version-2 entry this upgrade wrote
            ids = [key[keys.TIME_BYTES :]]
        elif phase == "expiry":
            if key[keys.TIME_BYTES] == 0:
                continue
            ids = keys.expiry_entry_ids(key, value)
        else:  # messages
            ids = [key]
        if phase != "messages":
            writes[family][key] = None
        for raw_id in ids:
            raw = value if phase == "messages" else messages.get(raw_id)
            if raw is None or raw_id in writes[keys.CF_MESSAGES]:
                continue  # gone already (a key in two wheels, say)
            if records.record_state(raw) not in _SOURCE_STATES[phase]:
                continue  # an entry its record disagrees with: the `messages` phase's
            writes[keys.CF_MESSAGES][raw_id] = None
            taken += 1
            if records.is_series(raw):
                writes[bk.CF_SERIES][raw_id] = raw
                continue
            wheel = phase[len("wheel_") :] if phase.startswith("wheel_") else ""
            expire_ms = keys.key_time_ms(key) if phase == "expiry" else 0
            rows.append(Row(raw_id.decode(), raw, wheel, expire_ms))
    else:
        last = None
    if rows:
        stage_rows(batch, rows, state, moves_cursor=phase == "ready")
    return last, lost


def _rekey(families: Any, writes: dict, phase: str, key: bytes, value: bytes) -> int:
    """A v1 `extras` or `trace` entry under its message's version-2 key; 1 when its
    message is gone (the entry is dropped)."""
    if phase == "trace":
        message_id, seq = key[: -keys.TIME_BYTES - 1], keys.decode_u64(key[-keys.TIME_BYTES :])
    else:
        message_id, seq = key, 0
    place = writes[bk.CF_IDS].get(message_id) or families[bk.CF_IDS].get(message_id)
    if place is not None:
        segment, index = be.decode_place(place)
        new = (
            bk.trace_key(segment, index, seq) if phase == "trace" else bk.place_key(segment, index)
        )
        writes[phase][new] = value
        return 0
    if families[bk.CF_SERIES].get(message_id) is not None:
        tail = b"trace" + key[-keys.TIME_BYTES :] if phase == "trace" else b"extras"
        writes[bk.CF_SERIES][message_id + b"\x00" + tail] = value
        return 0
    return 1


def _items(family: Any, lo: bytes, hi: bytes | None, limit: int | None = None):
    found = TimerReads._range(family, lo, hi)
    if limit is None:
        return found
    return (item for item, _ in zip(found, range(limit), strict=False))
