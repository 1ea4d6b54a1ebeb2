"""The `extras` column family (send options of the few messages that have them), and the
staged writes of the features that use it: dead letters and finished series.

Writer thread only for the `stage_*` functions, like `TimerStore`'s; see store.keys for
the layout and store.records for the flags that say a record has an entry here.
"""

from __future__ import annotations

from store import keys, records
from store.batch import StagedBatch
from store.timer_store import TimerStore


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


def stage_retire(batch: StagedBatch, message_id: str, record: bytes, expire_at_ms: int) -> None:
    """A finished series: its final record, kept until `expire_at_ms` (no wheel key)."""
    batch.records[message_id.encode()] = record
    batch.writes[keys.CF_EXPIRY][keys.wheel_key(expire_at_ms, message_id)] = b""
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
