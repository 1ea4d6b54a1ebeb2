"""The export of a version-2 (batch-level) store: the version-1 rows it reads as.

The export's files are a public contract, independent of the store's layout (decision
0014, step 5): the capacity report and every other export reader decode version-1
`messages` records (`timerwheel.store.records`) and version-1 wheel keys
(`timerwheel.store.keys`), and a version-2 store's export writes exactly those. So the
checkpoint of a version-2 store is first turned into a *version-1 view*: a scratch
RocksDB database with version 1's column families, holding for every message of the cut
the record and (while SCHEDULED) the wheel key that a version-1 store holding the same
timers would hold. timerwheel.store.export then cuts that view into slices as it cuts a
version-1 checkpoint, in this process or in worker processes, with the same rules and the
same manifest. The view costs one more write of the store's rows (RocksDB sorts them by
message id and wheel key, which a walk in segment order does not give), and disk in the
export's staging directory: a version-1 store's size for the same timers, which is more
than the version-2 store's. Memory holds no record: it holds the small families and the
wheels' entries (10 bytes a SCHEDULED message), each segment's dropped once it is walked.

The walk (`v1_rows`) is the decision's "walk `segments` joined with `segstate`, `acked`,
`overrides` and the cursor": the small families first (the cursor, the live `acked` and
`ready` entries, every override, the wheels' (slot, segment) entries), then the segments
in seq order, each with its `segstate` from a walk of that family beside it. No message
costs a point read. Each message's state is the join's (`timerwheel.store.batch_state.join`)
and its record is what a Get says of it (`timerwheel.store.batch_reads.to_timer`), so:

- an ACKED or CANCELLED message has no fired-at (`segstate` keeps no fire time), where a
  version-1 record keeps it; the capacity report's fire rate counts only the FIRED ones;
- a FIRED message's `ready_seq` is its fire position, as a Get reports it
  (`timerwheel.store.batch_reads.ready_seq`: its newest `ready` chunk's seq and its place
  in that chunk), from each topic's live `ready` entries read once (`FirePositions`);
- the record's placement bits are 0 ("not recorded", `records.record_placement`): a
  segment keeps no wheel a send placed a message in. The wheel that holds a SCHEDULED
  message's place at the cut is its wheel key's family, as in version 1;
- a message sent with a client-chosen id is keyed by that id, as in version 1, and its
  properties are in its record; `extras`, `ids` and the other version-2 families are not
  exported (version 1 exports no `extras` either), so no record has the extras flag.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Mapping
from dataclasses import replace
from typing import Any, NamedTuple

from rocksdict import AccessType, Options, Rdict, WriteBatch, WriteOptions

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys, records
from timerwheel.store.batch_reads import ready_seq, to_timer
from timerwheel.store.batch_state import LiveEntries, join
from timerwheel.store.keys import prefix_end, ready_prefix
from timerwheel.store.segments import SegmentView
from timerwheel.store.timer_reads import TimerReads

VIEW_BATCH_ROWS = 4096  # rows a WriteBatch of the view: bounded memory, few calls
_WHEELS = tuple(keys.CF_WHEEL.items())  # (wheel name, family)


class V1Row(NamedTuple):
    """One message of the cut as a version-1 store holds it."""

    message_id: bytes
    record: bytes
    wheel: str | None  # the wheel holding a SCHEDULED message's place; else None
    topic: bytes


def is_batch_layout(path: str) -> bool:
    """True when the RocksDB database at `path` has the version-2 families."""
    return bk.CF_SEGMENTS in Rdict.list_cf(path)


def write_v1_view(checkpoint_dir: str, view_dir: str) -> int:
    """Write the version-1 view of the version-2 checkpoint at `checkpoint_dir` into the
    new database `view_dir`, flushed to SST files and closed; returns its messages.

    The view's `meta` holds only the source's schema version (the manifest's
    `schema_version` then says which layout the rows came from; the bytes' layout is in
    its `key_layout`)."""
    source = _open(checkpoint_dir, read_only=True)
    view = _open(view_dir, read_only=False)
    families: dict[str, Any] = {}
    targets: dict[str, Any] = {}
    try:
        families.update(
            (name, source.get_column_family(name)) for name in bk.PLANNED_COLUMN_FAMILIES
        )
        targets.update((name, view.get_column_family(name)) for name in keys.ALL_COLUMN_FAMILIES)
        handles = {name: view.get_column_family_handle(name) for name in targets}
        write_options = WriteOptions()
        write_options.disable_wal = True  # every family is flushed before the view is read
        version = families[keys.CF_META].get(keys.META_SCHEMA_VERSION)
        batch, rows, messages = WriteBatch(raw_mode=True), 0, 0
        if version is not None:
            batch.put(keys.META_SCHEMA_VERSION, version, handles[keys.CF_META])
        message_cf = handles[keys.CF_MESSAGES]
        wheel_cf = {wheel: handles[family] for wheel, family in _WHEELS}
        for row in v1_rows(families):
            batch.put(row.message_id, row.record, message_cf)
            if row.wheel is not None:
                deliver = row.record[records.DELIVER_AT_TIME_BOUND]
                wheel_key = keys.wheel_key_at(deliver, row.message_id)
                batch.put(wheel_key, row.topic, wheel_cf[row.wheel])
            messages += 1
            rows += 1
            if rows == VIEW_BATCH_ROWS:
                view.write(batch, write_options)
                batch, rows = WriteBatch(raw_mode=True), 0
        view.write(batch, write_options)
        for family in targets.values():
            family.flush()
        return messages
    finally:
        families.clear()  # column-family objects hold a database open (NOTES-rocksdict)
        targets.clear()
        gc.collect()
        source.close()
        view.close()


def v1_rows(families: Mapping[str, Any]) -> Iterator[V1Row]:
    """Every message of a version-2 store (its column families by name), in (segment,
    index) order, as a version-1 row: the walk the module describes."""
    live, positions = LiveEntries(families), FirePositions(families)
    live.acked_at_ms(-1, 0)  # loads the live `acked` entries
    _ = live.cursor  # and the cursor: the small families first
    overrides: dict[int, dict[int, be.Override]] = {}
    for key, value in _items(families[bk.CF_OVERRIDES], b"", None):
        seq, index = bk.decode_place_key(key)
        overrides.setdefault(seq, {})[index] = be.decode_override(value)
    placed: dict[int, list[tuple[str, bytes]]] = {}
    for wheel, family in _WHEELS:
        for key, value in _items(families[family], b"", None):
            placed.setdefault(bk.decode_wheel_entry_key(key)[1], []).append((wheel, value))
    segstates = _items(families[bk.CF_SEGSTATE], b"", None)
    state_head = next(segstates, None)
    for key, raw in _items(families[bk.CF_SEGMENTS], b"", None):
        seq = bk.segment_seq(key)
        while state_head is not None and state_head[0] < key:
            state_head = next(segstates, None)  # a segstate whose segment is gone
        terminal = None
        if state_head is not None and state_head[0] == key:
            terminal = be.decode_segstate(state_head[1])
            state_head = next(segstates, None)
        yield from _segment_rows(
            seq, SegmentView(raw), terminal, overrides.pop(seq, {}), placed.pop(seq, ()), live,
            positions,
        )  # fmt: skip


def _segment_rows(
    seq: int,
    view: SegmentView,
    terminal: tuple[bytes, Any] | None,
    overrides: dict[int, be.Override],
    entries: Any,
    live: LiveEntries,
    positions: FirePositions,
) -> Iterator[V1Row]:
    wheel_at: dict[tuple[int, int], str] = {}
    for wheel, value in entries:
        times, indexes = be.decode_wheel_entry(value)
        wheel_at.update(dict.fromkeys(zip(times, indexes, strict=True), wheel))
    ids = view.message_ids(seq)
    encode, topics = records.encode_timer, {}
    for index in range(view.n):
        extras = view.extras(index)
        if extras is not None and extras.client_id is not None:
            message_id = extras.client_id  # the id its sender knows, as in version 1
        else:
            message_id = ids[index].decode()
        segstate = None if terminal is None else (terminal[0][index], terminal[1][index])
        found = join(message_id, seq, index, view, segstate, overrides.get(index), live)
        wheel = None
        if found.state is State.SCHEDULED:
            wheel = wheel_at.get((found.deliver_at_ms, index))
        topic = topics.get(found.topic)
        if topic is None:
            topic = topics[found.topic] = found.topic.encode()
        timer = to_timer(view, found)
        if found.state is State.FIRED:
            timer = replace(timer, ready_seq=positions.ready_seq(found.topic, seq, index))
        yield V1Row(message_id.encode(), encode(timer), wheel, topic)


class FirePositions:
    """A FIRED message's fire position (its Get's `ready_seq`), each topic's live `ready`
    entries read once, on first need: the newest chunk naming a message wins, as the
    join's fired-at takes the newest (`timerwheel.store.batch_reads.fire_position`)."""

    def __init__(self, families: Mapping[str, Any]) -> None:
        self._cf = families
        self._topics: dict[str, dict[tuple[int, int], int]] = {}

    def ready_seq(self, topic: str, segment: int, index: int) -> int:
        """0 when no live chunk of `topic` names the message."""
        found = self._topics.get(topic)
        if found is None:
            found = self._topics[topic] = {}
            prefix = ready_prefix(topic)
            for key, value in _items(self._cf[bk.CF_READY], prefix, prefix_end(prefix)):
                refs = be.decode_refs(value)  # chunks in seq order: the newest is last
                chunk = bk.chunk_seq(key)
                for place, ref in enumerate(zip(refs.segments, refs.indexes, strict=True)):
                    found[ref] = ready_seq(chunk, place)
        return found.get((segment, index), 0)


class BatchMetaError(ValueError):
    """A store with the version-2 families whose `meta` does not say version 2."""


def check_batch_meta(families: Mapping[str, Any], path: str) -> None:
    """BatchMetaError unless the store's `meta` says version 2 (an export of a stopped
    version-2 store: version 1's `check_meta` reads a scheduler state it has not)."""
    raw = families[keys.CF_META].get(keys.META_SCHEMA_VERSION)
    version = None if raw is None else keys.decode_u64(raw)
    if version != bk.PLANNED_SCHEMA_VERSION:
        raise BatchMetaError(
            f"data dir {path!r} has the batch-level layout's families but its `meta` says "
            f"schema version {version}, not {bk.PLANNED_SCHEMA_VERSION} (a version-1 store "
            "part way through its upgrade says 1: open it once with the version-2 layout to "
            "finish the upgrade, then export it)"
        )


def _open(path: str, read_only: bool) -> Rdict:
    if read_only:
        names = tuple(Rdict.list_cf(path))
        access: dict = {"access_type": AccessType.read_only()}
    else:
        names = ("default", *keys.ALL_COLUMN_FAMILIES)
        access = {}
    options = Options(raw_mode=True)
    options.create_if_missing(True)
    options.create_missing_column_families(True)
    options.set_advise_random_on_open(False)  # both are read front to back
    families = {name: Options(raw_mode=True) for name in names if name != "default"}
    return Rdict(path, options=options, column_families=families, **access)


# The one range read of store/ (its docstring says which rocksdict traps it avoids).
_items = TimerReads._range
