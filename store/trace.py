"""The `trace` column family: the events of a message's life its record cannot hold.

What is stored here, one key per event (``timerwheel.store.keys.trace_keys``): each cascade, a fire
straight out of an upper wheel, each delivery attempt and each failed one, a reschedule,
a replacement, a dead-lettering. Sent, fired, acked and cancelled are times the record
already has; `timerwheel.wheels.trace.assemble` merges both into the trace `Get` returns.

An event's value::

    struct ">BqqBBH" (21 bytes): kind, at_ms, deliver_at_ms, wheel, from_wheel, attempt
    then UTF-8 text: the subscriber of a DELIVERED event, else its detail

Writes are collected in the group commit being built (`StagedBatch.trace`, as
(message id, encoded event) pairs) and keyed at commit by `TraceLog.stage`, which takes
the next trace seqs: one counter for the whole store, persisted in ``meta`` in the same
batch, so a message's events keep the order they were written in across restarts. When
the retention sweep removes a record, `stage_forget` removes its events.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from rocksdict import ReadOptions

from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.trace import TOPIC_MOVES, TraceEvent, TraceKind

_EVENT = struct.Struct(">BqqBBH")
_KINDS = {int(kind): kind for kind in TraceKind}
_ATTEMPT_KINDS = (TraceKind.DELIVERED, TraceKind.NACKED)  # each names the attempt it was


def encode_event(event: TraceEvent) -> bytes:
    text = event.subscriber if event.kind is TraceKind.DELIVERED else event.detail
    head = _EVENT.pack(
        event.kind, event.at_ms, event.deliver_at_ms, keys.WHEEL_CODES[event.wheel],
        keys.WHEEL_CODES[event.from_wheel], event.attempt,
    )  # fmt: skip
    return head + text.encode()


def stage_event(batch: StagedBatch, message_id: str, event: TraceEvent) -> None:
    """One event of a message's life, written with this batch (keyed at commit: `stage`)."""
    batch.trace.append((message_id.encode(), encode_event(event)))


def decode_event(raw: bytes) -> TraceEvent:
    kind_code, at_ms, deliver_at_ms, wheel, from_wheel, attempt = _EVENT.unpack_from(raw)
    kind = _KINDS[kind_code]
    text = raw[_EVENT.size :].decode()
    delivered = kind is TraceKind.DELIVERED
    return TraceEvent(
        kind, at_ms, keys.WHEEL_NAMES[wheel], keys.WHEEL_NAMES[from_wheel], attempt,
        subscriber=text if delivered else "", detail="" if delivered else text,
        deliver_at_ms=deliver_at_ms,
    )  # fmt: skip


def cascaded_event(upper: str, lower: str, at_ms: int) -> bytes:
    """The value every timer of one cascade chunk shares."""
    return encode_event(TraceEvent(TraceKind.CASCADED, at_ms, wheel=lower, from_wheel=upper))


class TraceLog:
    """Reads any thread; `stage` and `stage_forget` on the writer thread only."""

    def __init__(self, trace_family, meta_family) -> None:
        self._trace = trace_family
        raw = meta_family.get(keys.META_TRACE_SEQ)
        self._next_seq = 0 if raw is None else keys.decode_u64(raw)

    def read(self, message_id: str) -> list[TraceEvent]:
        """The stored events of `message_id`, in the order they were written."""
        return [decode_event(value) for _, value in self._items(message_id.encode())]

    def attempts(self, message_ids: Iterable[str]) -> dict[str, int]:
        """Per id, the highest delivery attempt recorded, delivered or failed, since it
        last fired into its topic (a dead letter starts again); ids with none are left
        out (`timerwheel.wheels.trace.attempts_made` for a decoded trace)."""
        found = {}
        for message_id in message_ids:
            attempt = 0
            for _, value in self._items(message_id.encode()):
                if value[0] in _ATTEMPT_KINDS:
                    attempt = max(attempt, _EVENT.unpack_from(value)[5])
                elif value[0] in TOPIC_MOVES:
                    attempt = 0
            if attempt:
                found[message_id] = attempt
        return found

    def stage(self, batch: StagedBatch) -> None:
        """Key the batch's collected events with the next seqs (at commit; once: a commit
        tried again does not key them twice). Seqs of a batch that then fails to commit
        are skipped, never reused: gaps are harmless, order is what counts."""
        if not batch.trace:
            return
        seq = self._next_seq
        message_ids, events = zip(*batch.trace, strict=True)
        trace_keys = keys.trace_keys(message_ids, seq)
        batch.writes[keys.CF_TRACE].update(zip(trace_keys, events, strict=True))
        seq += len(trace_keys)
        batch.writes[keys.CF_META][keys.META_TRACE_SEQ] = keys.encode_u64(seq)
        self._next_seq = seq
        batch.trace = []

    def stage_forget(self, batch: StagedBatch, message_ids: Iterable[bytes]) -> None:
        """Remove every event of these messages (their records are being removed)."""
        writes = batch.writes[keys.CF_TRACE]
        for message_id in message_ids:
            for key, _ in self._items(message_id):
                writes[key] = None

    def _items(self, message_id: bytes):
        prefix = keys.trace_prefix(message_id)
        read_options = ReadOptions()  # must outlive the iteration (see TimerReads._range)
        read_options.set_iterate_upper_bound(keys.prefix_end(prefix))
        yield from self._trace.items(from_key=prefix, read_opt=read_options)
