"""The `extras` column family (send options of the few messages that have them): their
encoding, and the staged writes of the features that use it: dead letters and finished
series.

Writer thread only for the `stage_*` functions, like `TimerStore`'s; see timerwheel.store.keys for
the layout and timerwheel.store.records for the flags that say a record has an entry here.
"""

from __future__ import annotations

import dataclasses
import json

from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import MissedPolicy, Repeat, SendOptions
from timerwheel.wheels.retry import RetryKind, RetryPolicy


def get_extras(store: TimerStore, batch: StagedBatch | None, message_id: bytes) -> bytes | None:
    """A message's `extras` entry, as `batch` (if given) will leave it."""
    if batch is not None:
        staged = batch.writes[keys.CF_EXTRAS]
        if message_id in staged:
            return staged[message_id]
    return store.database.families[keys.CF_EXTRAS].get(message_id)


def stage_extras(batch: StagedBatch, message_id: bytes, extras: bytes | None) -> None:
    """Write (None: remove) a message's `extras` entry."""
    batch.writes[keys.CF_EXTRAS][message_id] = extras


def stage_retire(
    store: TimerStore, batch: StagedBatch, message_id: str, record: bytes, expire_at_ms: int
) -> None:
    """A finished series: its final record, kept until `expire_at_ms` (no wheel key)."""
    batch.records[message_id.encode()] = record
    store.stage_expiry(batch, expire_at_ms, [message_id.encode()])
    batch.operations += 1


def stage_dead_letter(
    store: TimerStore, batch: StagedBatch, message_id: bytes, raw: bytes, record: bytes,
    topic: str, seq: int,
) -> None:  # fmt: skip
    """Move a FIRED message to `topic` (its DLQ): old ready entry out, the new record
    FIRED there under `seq`, its `extras` entry (if any) removed."""
    batch.remove_ready(records.record_topic(raw), records.record_ready_seq(raw))
    if records.has_extras(raw):
        batch.writes[keys.CF_EXTRAS][message_id] = None
    store.stage_fire_new(batch, message_id, record, topic, seq)


def encode_extras(
    options: SendOptions, next_number: int = 1, next_at_ms: int = 0, paused: bool = False
) -> bytes:
    """Send options as stored in `extras`: compact JSON (few messages have them). A series
    also keeps the number and schedule time of its next occurrence there, and whether it
    is paused (`timerwheel.engine.series`)."""
    data: dict = {}
    if options.max_attempts is not None:
        data["max_attempts"] = options.max_attempts
    if options.dead_letter_topic:
        data["dead_letter_topic"] = options.dead_letter_topic
    if options.retry is not None:
        data["retry"] = encode_retry(options.retry)
    if options.repeat is not None:
        repeat = dataclasses.asdict(options.repeat)
        repeat["missed"] = int(options.repeat.missed)
        data.update(repeat={k: v for k, v in repeat.items() if v}, n=next_number, at=next_at_ms)
        if paused:
            data["paused"] = True
    return json.dumps(data, separators=(",", ":")).encode()


def decode_extras(raw: bytes) -> SendOptions:
    return decode_series(raw)[0]


def decode_series(raw: bytes) -> tuple[SendOptions, int, int]:
    """(options, number of the next occurrence, its schedule time) from `extras`."""
    return decode_series_state(raw)[:3]


def decode_series_state(raw: bytes) -> tuple[SendOptions, int, int, bool]:
    """`decode_series`, and whether the series is paused."""
    data = json.loads(raw)
    repeat = data.get("repeat")
    if repeat is not None:
        repeat = Repeat(**{**repeat, "missed": MissedPolicy(repeat.get("missed", 0))})
    retry = data.get("retry")
    options = SendOptions(
        data.get("max_attempts"), data.get("dead_letter_topic", ""), repeat,
        None if retry is None else decode_retry(retry),
    )  # fmt: skip
    return options, data.get("n", 0), data.get("at", 0), bool(data.get("paused"))


def encode_retry(policy: RetryPolicy) -> list:
    """A retry policy as a short JSON list (kind, initial, max, multiplier, jitter)."""
    return [int(policy.kind), policy.initial_ms, policy.max_ms, policy.multiplier,
            policy.jitter_percent]  # fmt: skip


def decode_retry(data: list) -> RetryPolicy:
    kind, initial_ms, max_ms, multiplier, jitter_percent = data
    return RetryPolicy(RetryKind(kind), initial_ms, max_ms, float(multiplier), jitter_percent)
