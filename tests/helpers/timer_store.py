"""The store contract tests' shared set-up (tests/store/test_timer_store_*.py): a timer,
staged the way the engine stages it (its encoded record plus a key in one wheel),
committed in one batch, and read back through the store's own read API (the wheel's
ids, the ready entries of a topic). The fixture that opens the store on real RocksDB,
`open_store`, is in tests/store/conftest.py."""

from __future__ import annotations

from pathlib import Path

from timerwheel.common import State
from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import Timer, When, WhenKind

# The store the version-1 layout wrote (tests/fixtures/make_store_v1.py), which the
# upgrades open: the `v1` fixture of tests/store/conftest.py unpacks a copy.
V1_FIXTURE = Path(__file__).parent.parent / "fixtures" / "store-v1.tar.gz"

T0 = 1_700_000_000_000


def read_ready(store, topic: str, after_seq: int, limit: int, max_bytes: int = 0):
    return records.decode_fired(store.read_ready_raw(topic, after_seq, limit, max_bytes))


def timer(message_id: str, deliver_at_ms: int, topic: str = "orders", body: bytes = b"b") -> Timer:
    return Timer(
        message_id=message_id, topic=topic, body=body, properties={"k": "v"},
        deliver_at_ms=deliver_at_ms, created_at_ms=T0, state=State.SCHEDULED,
        when=When(WhenKind.DELIVER_AT, deliver_at_ms),
    )  # fmt: skip


def schedule(store: TimerStore, batch: StagedBatch, t: Timer, wheel: str) -> None:
    """Stage `t` the way the engine does: its encoded record plus a key in `wheel`."""
    raw = records.encode_timer(t)
    store.stage_schedule(
        batch, t.message_id.encode(), raw, t.deliver_at_ms, t.topic.encode(), wheel
    )


def commit(store: TimerStore, stage) -> StagedBatch:
    batch = StagedBatch()
    stage(batch)
    store.commit(batch)
    return batch


def wheel_ids(store: TimerStore, wheel: str) -> list[str]:
    entries = store.scan(wheel, b"", keys.time_bound(2**63 - 1), 10**6)
    return [keys.decode_timer_key(k).message_id for k, _ in entries]


def timer_fields(timer) -> dict:
    """A `Timer` as `tests/fixtures/make_store_v1.py` wrote each into expected.json
    (that script keeps its own copy: it runs at the commit that made the fixture)."""
    return {
        "message_id": timer.message_id, "topic": timer.topic, "body": timer.body.decode(),
        "properties": dict(timer.properties), "deliver_at_ms": timer.deliver_at_ms,
        "created_at_ms": timer.created_at_ms, "state": timer.state.name,
        "when": [int(timer.when.kind), timer.when.value], "fired_at_ms": timer.fired_at_ms,
        "acked_at_ms": timer.acked_at_ms, "cancelled_at_ms": timer.cancelled_at_ms,
        "ready_seq": timer.ready_seq, "wheel": timer.wheel,
    }  # fmt: skip
