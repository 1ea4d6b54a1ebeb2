"""The packing of version-1 records into version-2 segments (decision 0014, step 5): what
`timerwheel.store.segment_upgrade` stages for each bounded chunk of messages it moves.

A chunk's records are split by what they become, and each kind is packed into segments
of its own, since a `segstate` entry says a whole segment is terminal:

- **fired**: a FIRED record (a v1 `ready` entry names it), or a SCHEDULED one due before
  the fire cursor (below). Its place must be at or before the cursor, and it gets a
  `ready` chunk reference: one chunk a run of one topic and one fire time, in the v1
  fire order (the record's fire seq), so Get reports the v1 fired-at.
- **scheduled**: a wheel pair in the wheel its v1 key was in, and +1 in its pending
  counter's minute, as the send keeps them.
- **terminal** (ACKED, CANCELLED): `segstate` with each message's time, and `expiry` at
  the latest v1 expiry of the segment's messages (none is swept before its v1 time).

Within a kind the records are ordered by (created ms, deliver ms, id) and cut into
segments of at most `segment_max` messages and `MAX_TOPICS` topics, and a cut also
falls where the created ms changes: a segment keeps one created ms, and this keeps every
message's. Each segment's index order is then its deliver order, which its wheel entries
need. Every message keeps its v1 id as its client id (the sparse part and an `ids`
entry), so Get, Cancel and Ack by the 32-hex id keep working; the segment's random part
is drawn but never handed out. Properties and a `when` the column cannot give go into
the sparse part; `Extras.flags` keeps the v1 record's "has an `extras` entry" bit. A v1
record's first-delivery trailer (records version 2) becomes the DELIVERED trace event it
stands for, keyed by (segment, index, trace seq).

A SCHEDULED record due before the cursor's deliver ms would read FIRED by the join's
rule (its place is before the cursor) with no `ready` chunk, so no Ack could retire it.
It is fired here instead: it is due anyway (the v1 scheduler's clock had passed the
cursor's deliver ms), and its fire time is the later of its deliver time and the v1
clock (`meta` clock.now_ms), so it is never fired early.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import NamedTuple

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.segment_ids import RANDOM_BYTES
from timerwheel.store.segment_send import SLOT_MS
from timerwheel.store.segments import MAX_TOPICS, Extras, encode_segment
from timerwheel.store.trace import encode_event
from timerwheel.wheels.domain import Timer, WhenKind
from timerwheel.wheels.trace import TraceEvent, TraceKind

_TERMINAL = (State.ACKED, State.CANCELLED)
CHUNK_MAX = 1024  # references a `ready` chunk the upgrade writes


class Row(NamedTuple):
    """One v1 record and what its source says of it."""

    message_id: str
    raw: bytes
    wheel: str = ""  # the v1 wheel holding it (SCHEDULED)
    expire_ms: int = 0  # its v1 `expiry` time (ACKED, CANCELLED); 0: not known


@dataclass
class PackState:
    """What the packing continues from, batch to batch (kept in `meta`)."""

    segment_seq: int
    chunk_seq: int
    cursor: tuple[int, int, int]  # the v2 fire cursor so far; (-1, 0, 0): nothing fired
    now_ms: int  # the v1 clock, the fire time of a late SCHEDULED record
    trace_seq: int
    retention_ms: int
    segment_max: int
    randbytes: Callable[[int], bytes] = os.urandom
    fired: list = field(default_factory=list)  # this batch's (topic, fired ms, order, seg, idx)


def stage_rows(
    batch: StagedBatch, rows: list[Row], state: PackState, moves_cursor: bool = True
) -> None:
    """Stage `rows` as version-2 messages into `batch` (their v1 keys are the caller's).
    Only FIRED records with `ready` entries move the cursor (`moves_cursor`, before any
    SCHEDULED one is placed): a FIRED record found later, whose place is after the
    cursor, is placed again as SCHEDULED, since moving the cursor past it would turn
    the pending messages placed before it FIRED with no chunk."""
    by_kind: dict[str, list[tuple[Timer, Row]]] = {"fired": [], "scheduled": [], "terminal": []}
    for row in rows:
        timer = records.decode_timer(row.message_id, row.raw)
        if timer.state in _TERMINAL:
            kind = "terminal"
        elif timer.state is State.FIRED and (moves_cursor or timer.deliver_at_ms < state.cursor[0]):
            kind = "fired"
        else:
            kind = "scheduled"
        by_kind[kind].append((timer, row))
    state.fired = []
    for kind in ("fired", "scheduled", "terminal"):
        group = sorted(
            by_kind[kind], key=lambda p: (p[0].created_at_ms, p[0].deliver_at_ms, p[0].message_id)
        )
        for segment in _cut(group, state.segment_max):
            _stage_segment(batch, kind, segment, state)
    _stage_chunks(batch, state)


def _cut(group: list[tuple[Timer, Row]], segment_max: int) -> list[list[tuple[Timer, Row]]]:
    out: list[list[tuple[Timer, Row]]] = []
    current: list[tuple[Timer, Row]] = []
    topics: set[str] = set()
    for pair in group:
        timer = pair[0]
        if current and (
            len(current) >= segment_max
            or timer.created_at_ms != current[0][0].created_at_ms
            or (timer.topic not in topics and len(topics) >= MAX_TOPICS)
        ):
            out.append(current)
            current, topics = [], set()
        current.append(pair)
        topics.add(timer.topic)
    if current:
        out.append(current)
    return out


def _stage_segment(
    batch: StagedBatch, kind: str, pairs: list[tuple[Timer, Row]], state: PackState
) -> None:
    state.segment_seq += 1
    seq = state.segment_seq
    writes = batch.writes
    timers = [timer for timer, _ in pairs]
    created_ms = timers[0].created_at_ms
    table = {topic: i for i, topic in enumerate(dict.fromkeys(t.topic for t in timers))}
    extras = {}
    for index, (timer, row) in enumerate(pairs):
        derived = timer.deliver_at_ms - created_ms
        when = timer.when
        keep_when = not (when.kind is WhenKind.DELAY and when.value == derived)
        flags = records.EXTRAS_FLAG if records.has_extras(row.raw) else 0
        extras[index] = Extras(
            flags, when if keep_when else None, timer.message_id, dict(timer.properties)
        )
        writes[bk.CF_IDS][bk.ids_key(timer.message_id)] = be.place_value(seq, index)
        delivered = records.first_delivery(row.raw)
        if delivered is not None:
            event = TraceEvent(
                TraceKind.DELIVERED, delivered[0], attempt=1, subscriber=delivered[1]
            )
            writes[keys.CF_TRACE][bk.trace_key(seq, index, state.trace_seq)] = encode_event(event)
            state.trace_seq += 1
    writes[bk.CF_SEGMENTS][bk.segment_key(seq)] = encode_segment(
        created_ms, tuple(table), bytes(table[t.topic] for t in timers),
        [t.deliver_at_ms for t in timers], [t.body for t in timers],
        state.randbytes(RANDOM_BYTES * len(timers)), extras, WhenKind.DELAY,
    )  # fmt: skip
    if kind == "terminal":
        _stage_terminal(batch, seq, pairs, state)
    elif kind == "fired":
        for index, timer in enumerate(timers):
            order = (0, timer.ready_seq)
            state.fired.append((timer.topic, timer.fired_at_ms, order, seq, index))
            state.cursor = max(state.cursor, (timer.deliver_at_ms, seq, index))
    else:
        _stage_scheduled(batch, seq, pairs, state)


def _stage_terminal(
    batch: StagedBatch, seq: int, pairs: list[tuple[Timer, Row]], state: PackState
) -> None:
    states, times, expire_ms = bytearray(), [], 0
    for timer, row in pairs:
        at_ms = timer.acked_at_ms if timer.state is State.ACKED else timer.cancelled_at_ms
        states.append(int(timer.state))
        times.append(at_ms)
        expire_ms = max(expire_ms, row.expire_ms or at_ms + state.retention_ms)
    writes = batch.writes
    writes[bk.CF_SEGSTATE][bk.segment_key(seq)] = be.segstate_entry(bytes(states), times)
    writes[keys.CF_EXPIRY][bk.expiry_key(expire_ms, seq)] = b""


def _stage_scheduled(
    batch: StagedBatch, seq: int, pairs: list[tuple[Timer, Row]], state: PackState
) -> None:
    cursor_ms = state.cursor[0]
    entries: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    deltas = batch.count_deltas
    for index, (timer, row) in enumerate(pairs):
        deliver_ms = timer.deliver_at_ms
        if deliver_ms < cursor_ms:  # before the cursor: fired now, never before it is due
            fired_ms = max(deliver_ms, state.now_ms)
            state.fired.append((timer.topic, fired_ms, (1, deliver_ms), seq, index))
            continue
        wheel = row.wheel or records.record_placement(row.raw) or "second"
        slot_ms = SLOT_MS[wheel]
        times, indexes = entries.setdefault((wheel, deliver_ms - deliver_ms % slot_ms), ([], []))
        times.append(deliver_ms)
        indexes.append(index)
        bucket = keys.count_keys(timer.topic.encode(), deliver_ms)[0]
        deltas[bucket] = deltas.get(bucket, 0) + 1
    writes = batch.writes
    for (wheel, start), (times, indexes) in entries.items():
        writes[keys.CF_WHEEL[wheel]][bk.wheel_entry_key(start, seq)] = be.wheel_entry(
            times, indexes
        )


def _stage_chunks(batch: StagedBatch, state: PackState) -> None:
    """This batch's fired references as `ready` chunks: a run of one topic and one fire
    time in the v1 fire order, at most CHUNK_MAX references."""
    fired = sorted(state.fired, key=lambda f: (f[0], f[2]))
    runs: list[list] = []
    for topic, fired_ms, _, seq, index in fired:
        last = runs[-1] if runs else None
        if last is None or last[0] != topic or last[1] != fired_ms or len(last[2]) >= CHUNK_MAX:
            runs.append([topic, fired_ms, [], []])
            last = runs[-1]
        last[2].append(seq)
        last[3].append(index)
    ready = batch.writes[keys.CF_READY]
    for topic, fired_ms, segs, idxs in runs:
        state.chunk_seq += 1
        ready[bk.chunk_key(topic, state.chunk_seq)] = be.refs_entry(fired_ms, segs, idxs)
    state.fired = []
