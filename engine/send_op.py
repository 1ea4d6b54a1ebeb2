"""The send operation: one or more new timers, stored together or not at all.

A `SendOp` is prepared outside the writer (validated, ids chosen, records encoded:
`timerwheel.engine.prepare`), may cross from a worker process to the engine's without its requests
(`__getstate__`), and is applied by the writer in a group commit like every operation
(`timerwheel.engine.ops`): it checks every send before it stages any. `stage_new` places one timer
(a wheel, or fired at once when due); moves and dead letters use it too
(timerwheel.engine.move_ops).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar, NamedTuple

from timerwheel.common import SendResult, State
from timerwheel.engine.ops import Op, WriterContext, unschedule
from timerwheel.engine.series import fire_due_series
from timerwheel.store import extras as extras_cf
from timerwheel.store import records
from timerwheel.store import trace as trace_cf
from timerwheel.store.batch import SeriesChange, StagedBatch
from timerwheel.wheels.domain import (
    NO_PROPERTIES,
    AlreadyExists,
    FailedPrecondition,
    IfExists,
    SendSpec,
    When,
    WhenKind,
)
from timerwheel.wheels.trace import TraceEvent, TraceKind, fire_stored


class PreparedSend(NamedTuple):
    """One send of a `SendOp`, as the one-by-one paths handle it (client-chosen ids,
    sends already due)."""

    # None in the engine's process for an op of server-made ids: only ops with a client's
    # id need the request to compare (`SendOp.__getstate__`).
    spec: SendSpec | None
    message_id: str
    deliver_at_ms: int
    client_chose_id: bool
    record: bytes
    topic: str
    extras: bytes | None = None  # its `extras` entry (send options), if any


@dataclass(frozen=True, slots=True)
class _Replacement:
    """A send with IfExists.REPLACE that found a SCHEDULED or CANCELLED timer under its id."""

    send: PreparedSend
    old_record: bytes


@dataclass
class SendOp(Op):
    """One or more sends, atomic together: all are stored or none.

    Prepared in the caller's thread (validated, ids chosen, records encoded) and held
    column by column, one list per field, so the writer stages a batch of new timers
    with a few list operations rather than per-send objects.
    """

    specs: list[SendSpec] = field(default_factory=list)  # [] across processes: __getstate__
    message_ids: list[str] = field(default_factory=list)
    deliver_times_ms: list[int] = field(default_factory=list)
    records: list[bytes] = field(default_factory=list)
    topics: list[str] = field(default_factory=list)
    client_ids: bool = False  # some spec carries a client-chosen id
    extras: list[bytes | None] | None = None  # per send, when some carry options
    sheddable: ClassVar[bool] = True  # refused past the writer's queue budget (Op)

    def results_as_prepared(self) -> list[SendResult]:
        """Each send stored under the id and time it was prepared with: the results of
        an op of server-made ids (nothing in it can be refused or found existing)."""
        return list(map(SendResult, self.message_ids, self.deliver_times_ms))

    def packed_results(self, results: list[SendResult]) -> list[SendResult] | None:
        """The results as they cross back to the process that prepared the op: None when
        they are `results_as_prepared()`, which that process can make itself. Pickling
        them was a real part of the engine process's cost a message
        (`python -m bench.ipc_bench`)."""
        return results if self.client_ids else None

    def unpacked_results(self, packed: list[SendResult] | None) -> list[SendResult]:
        """`packed_results` undone, in the process that prepared the op."""
        return self.results_as_prepared() if packed is None else packed

    def reads(self) -> list[bytes]:
        if not self.client_ids:
            return []
        return [s.message_id.encode() for s in self.specs if s.message_id]

    @property
    def weight(self) -> int:
        return len(self.message_ids)

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> list[SendResult]:
        if not self.client_ids:
            # Server-made ids are unique: nothing to check, nothing can be refused.
            _stage_all_new(ctx, batch, self, now_ms)
            return self.results_as_prepared()
        # Check every send before staging any, so a refused batch stages nothing.
        first_in_op: dict[str, PreparedSend] = {}
        plan: list[SendResult | PreparedSend | _Replacement] = []
        for send in self.prepared():
            earlier = first_in_op.get(send.message_id) if send.client_chose_id else None
            if earlier is not None:
                _check_same(send, earlier)
                plan.append(SendResult(earlier.message_id, earlier.deliver_at_ms))
                continue
            previous = _existing_result(ctx, batch, send)
            first_in_op[send.message_id] = send
            plan.append(previous if previous is not None else send)
        results = []
        for item in plan:
            if isinstance(item, _Replacement):
                item = _stage_replacement(ctx, batch, item, now_ms)
            elif isinstance(item, PreparedSend):
                stage_new(ctx, batch, item, now_ms)
                item = SendResult(item.message_id, item.deliver_at_ms)
            results.append(item)
        return results

    # Across processes, an op of server-made ids leaves its specs behind: the writer
    # stores its columns (each body is in its record) and needs nothing else of a request
    # but its topic. Unpickling the op with its SendSpecs held the engine's GIL about five
    # times as long a message as without, and their bodies crossed twice
    # (`python -m bench.ipc_bench`). An op with a client's id needs them (a repeated id is
    # compared with the stored request), and they travel as plain tuples: pickling a list
    # of tuples runs in C, pickling the SendSpecs calls Python for each one and each of
    # its enums, an order of magnitude more. No properties travel as None (the shared
    # empty mapping of `NO_PROPERTIES` does not pickle).
    def __getstate__(self) -> dict:
        state = super().__getstate__()
        state["specs"] = None
        if self.client_ids:
            state["specs"] = [
                (s.topic, s.body, int(s.when.kind), s.when.value, s.properties or None,
                 s.message_id, int(s.if_exists))
                for s in self.specs
            ]  # fmt: skip
        return state

    def __setstate__(self, state: dict) -> None:
        rows = state.pop("specs")
        super().__setstate__(state)
        if rows is None:
            self.specs = []
            return
        kinds = {int(kind): kind for kind in WhenKind}
        policies = {int(policy): policy for policy in IfExists}  # IfExists(n) is a Python call
        self.specs = [
            SendSpec(
                topic,
                body,
                When(kinds[kind], value),
                properties or NO_PROPERTIES,
                message_id,
                policies[if_exists],
            )
            for topic, body, kind, value, properties, message_id, if_exists in rows
        ]

    def prepared(self) -> list[PreparedSend]:
        count = len(self.message_ids)
        specs = self.specs or [None] * count  # none: server-made ids, across processes
        extras = self.extras or [None] * count
        return [
            PreparedSend(
                spec,
                message_id,
                deliver_at_ms,
                bool(spec and spec.message_id),
                record,
                topic,
                extra,
            )
            for spec, message_id, deliver_at_ms, record, topic, extra in zip(
                specs,
                self.message_ids,
                self.deliver_times_ms,
                self.records,
                self.topics,
                extras,
                strict=True,
            )
        ]


def _check_same(send: PreparedSend, earlier: PreparedSend) -> None:
    if send.spec != earlier.spec:
        raise AlreadyExists(
            f"message_id={send.message_id!r}: given twice in one batch with different content"
        )


def _existing_result(
    ctx: WriterContext, batch: StagedBatch, send: PreparedSend
) -> SendResult | _Replacement | None:
    """What a client-chosen id already names decides the send (`SendSpec.if_exists`):
    None (free: store it), the existing answer, or a replacement of the old record."""
    if not send.client_chose_id:
        return None  # server-made ids are unique by construction: no read needed
    raw = ctx.store.lookup(batch, send.message_id.encode())
    if raw is None:
        return None
    timer = records.decode_timer(send.message_id, raw)
    if_exists = send.spec.if_exists
    if if_exists is IfExists.RESTORE and timer.state in (State.ACKED, State.CANCELLED):
        return None  # stored again as new (the sweep keeps a record that is live again)
    if if_exists is IfExists.KEEP or if_exists is IfExists.RESTORE:
        return SendResult(timer.message_id, timer.deliver_at_ms, True, timer.state)
    if if_exists is IfExists.REPLACE:
        if timer.state not in _REPLACEABLE:
            raise FailedPrecondition(
                f"message_id={send.message_id!r}: already {timer.state.name}; "
                "only a SCHEDULED or CANCELLED timer can be replaced"
            )
        return _Replacement(send, raw)
    if not timer.same_request(send.spec):
        # Nothing of the stored message is shown: the id may belong to another client,
        # and its topic, time or state are not this caller's to learn.
        raise AlreadyExists(
            f"message_id={send.message_id!r}: already used by a different message; "
            "a retry must repeat the original topic, body, properties and time exactly"
        )
    return SendResult(timer.message_id, timer.deliver_at_ms, True, timer.state)


# REPLACE stores the new version over these. A CANCELLED timer will never be delivered,
# so storing a new one under its id cannot deliver anything twice: that is what makes a
# cancelled series id (or any cancelled id) usable again before its retention ends.
# FIRED and ACKED ones were (or are being) delivered: a REPLACE of those stays refused.
_REPLACEABLE = (State.SCHEDULED, State.CANCELLED)


def _stage_replacement(
    ctx: WriterContext, batch: StagedBatch, item: _Replacement, now_ms: int
) -> SendResult:
    """Store a new version under a SCHEDULED (debounce) or CANCELLED id, in this batch.

    The new record's times start again (created now, not cancelled), so what the old
    version's record said about its life is written down as events first: its SENT (when
    and where it was first placed) and, for a cancelled one, its CANCELLED (and its
    FIRED, for one a purge cancelled). The trace of the id then reads SENT, ..., REPLACED,
    SENT (the new version), ...: the first send time survives any number of REPLACEs."""
    send, old = item.send, item.old_record
    message_id = send.message_id
    if records.is_scheduled(old):
        unschedule(ctx, batch, message_id, old)
    else:  # CANCELLED: its retention entry goes (the new version makes its own)
        cancelled_at_ms = records.trace_facts(old).cancelled_at_ms
        ctx.store.stage_unexpire(batch, cancelled_at_ms + ctx.retention_ms, message_id.encode())
    for event in _record_events(ctx, message_id, old):
        trace_cf.stage_event(batch, message_id, event)
    send = _replace_extras(ctx, batch, item)
    wheel = stage_new(ctx, batch, send, now_ms)
    # At the new version's send time, which its SENT shows: the writer applies the send a
    # moment after it was received, and REPLACED must not read as after that SENT.
    sent_at_ms = records.trace_facts(send.record).created_at_ms
    replaced = TraceEvent(
        TraceKind.REPLACED, sent_at_ms, wheel=wheel, deliver_at_ms=send.deliver_at_ms
    )
    trace_cf.stage_event(batch, message_id, replaced)
    return SendResult(send.message_id, send.deliver_at_ms)


def _record_events(ctx: WriterContext, message_id: str, raw: bytes) -> list[TraceEvent]:
    """The events a replaced record's header holds, which its new version's would lose."""
    facts = records.trace_facts(raw)
    events = [TraceEvent(TraceKind.SENT, facts.created_at_ms, wheel=facts.placed_in)]
    if facts.fired_at_ms and not fire_stored(ctx.store.trace.read(message_id), facts.fired_at_ms):
        events.append(TraceEvent(TraceKind.FIRED, facts.fired_at_ms))
    if facts.cancelled_at_ms:
        events.append(TraceEvent(TraceKind.CANCELLED, facts.cancelled_at_ms))
    return events


def _replace_extras(ctx: WriterContext, batch: StagedBatch, item: _Replacement) -> PreparedSend:
    """The old timer's `extras` go; a series replacing a series continues its numbering,
    so a new occurrence never takes the id of one still kept, and a paused series stays
    paused (a cancelled one is no longer paused: it starts again)."""
    send, message_id = item.send, item.send.message_id.encode()
    if not records.has_extras(item.old_record):
        return send
    old_extras = extras_cf.get_extras(ctx.store, batch, message_id)
    extras_cf.stage_extras(batch, message_id, None)
    if records.is_series(item.old_record) and records.is_series(send.record) and old_extras:
        _, number, _, paused = extras_cf.decode_series_state(old_extras)
        paused = paused and records.is_scheduled(item.old_record)
        options, _, at_ms = extras_cf.decode_series(send.extras or b"{}")
        return send._replace(extras=extras_cf.encode_extras(options, number, at_ms, paused))
    return send


def _stage_all_new(ctx: WriterContext, batch: StagedBatch, op: SendOp, now_ms: int) -> None:
    """Stage a batch of new timers at once (the SendBatch hot path)."""
    wheels = ctx.scheduler.wheel_names(op.deliver_times_ms)
    if None in wheels:  # some are already due: those take the one-by-one path
        for send in op.prepared():
            stage_new(ctx, batch, send, now_ms)
        return
    message_ids = [message_id.encode() for message_id in op.message_ids]
    placed = list(map(records.with_placement, op.records, wheels))
    ctx.store.stage_schedule_many(
        batch, message_ids, placed, op.deliver_times_ms,
        [topic.encode() for topic in op.topics], wheels,
    )  # fmt: skip
    if op.extras:
        for message_id, extras in zip(message_ids, op.extras, strict=True):
            if extras is not None:
                extras_cf.stage_extras(batch, message_id, extras)


def stage_new(
    ctx: WriterContext, batch: StagedBatch, send: PreparedSend, now_ms: int, *, sent: bool = True
) -> str:
    """Store a timer in the wheel its time calls for, or fire it at once when due.

    `sent`: a new send, whose record says where it was placed (the start of its trace);
    False for a timer that moves (Reschedule), which keeps its record's first placement.
    Returns the wheel it went into ("": fired at once).
    """
    message_id = send.message_id.encode()
    if send.extras is not None:
        extras_cf.stage_extras(batch, message_id, send.extras)
    wheel = ctx.scheduler.placement(send.deliver_at_ms)
    if sent:
        placed = records.with_placement(send.record, wheel.name if wheel else "")
        send = send._replace(record=placed)
    if records.is_series(send.record):  # sent, replaced or moved: noted for the listeners
        extras = send.extras or extras_cf.get_extras(ctx.store, batch, message_id)
        batch.series_changes.append(SeriesChange(send.message_id, send.record, extras))
    if wheel is None and records.is_series(send.record):  # first occurrence due: fire it
        batch.records[message_id] = send.record
        seq = ctx.scheduler.take_fire_seqs(1)
        batch.series_due.append((message_id, send.record, send.topic, seq))
        fire_due_series(ctx, batch, now_ms)
    elif wheel is None:  # already due: fire at once, never through a wheel
        seq = ctx.scheduler.take_fire_seqs(1)
        fired = records.with_transition(send.record, State.FIRED, fired_at_ms=now_ms, ready_seq=seq)
        ctx.store.stage_fire_new(batch, message_id, fired, send.topic, seq)
    else:
        topic = send.topic.encode()
        ctx.store.stage_schedule(
            batch, message_id, send.record, send.deliver_at_ms, topic, wheel.name
        )
    return wheel.name if wheel else ""
