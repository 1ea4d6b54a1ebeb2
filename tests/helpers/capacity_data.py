"""A store with known timers for the export and capacity-report tests, and its ground truth.

Built with the real engine in virtual time. Every timer's deliver time, topic and body
size is chosen here, so the truth is known without reading the store back; which wheel
holds each scheduled timer is read from the wheel column families directly.

    T0            T0+5 s: audit.log fired (some acked), then everything else is sent
    |-- near: 30 timers over T0+10..40 s (second / minute wheel), with properties
    |-- hot second HOT_A: 700 'orders' timers;  hot second HOT_B: 300 'payments' timers
    |-- spread: 2000 timers over 3 days, 4 topics (20 of them cancelled)
    |-- far: 50 'emails' timers 300 days away (hour wheel)
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from timerwheel.engine.engine import Engine
from timerwheel.store import keys
from timerwheel.store.export import export_data_dir
from timerwheel.store.rocks import RocksDatabase
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, Settings

T0_MS = 1_700_000_123_000
SENT_AT_MS = T0_MS + 5_000
HOT_A_MS = T0_MS + 2 * HOUR_MS + 17_000  # a second boundary
HOT_B_MS = T0_MS + 26 * HOUR_MS + 3_000
TOPICS = ("orders", "payments", "emails", "audit.log")


@dataclass(frozen=True)
class Row:
    topic: str
    deliver_at_ms: int
    created_at_ms: int
    body_bytes: int
    state: str
    wheel: str | None


@dataclass
class Truth:
    rows: dict[str, Row]  # message id -> row

    def pending(self) -> list[Row]:
        return [row for row in self.rows.values() if row.state == "SCHEDULED"]

    def per_hour(self) -> Counter:
        return Counter(row.deliver_at_ms // HOUR_MS * HOUR_MS for row in self.pending())

    def per_second(self) -> Counter:
        return Counter(row.deliver_at_ms // 1000 * 1000 for row in self.pending())

    def per_topic(self) -> dict[str, tuple[int, int]]:
        """topic -> (pending timers, pending body bytes)"""
        counts: Counter = Counter()
        sizes: Counter = Counter()
        for row in self.pending():
            counts[row.topic] += 1
            sizes[row.topic] += row.body_bytes
        return {topic: (counts[topic], sizes[topic]) for topic in counts}

    def per_wheel(self) -> Counter:
        return Counter(row.wheel for row in self.pending())

    def states(self) -> Counter:
        return Counter(row.state for row in self.rows.values())


def _spec(topic: str, body_bytes: int, deliver_at_ms: int, properties=None) -> SendSpec:
    when = When(WhenKind.DELIVER_AT, deliver_at_ms)
    return SendSpec(topic, b"x" * body_bytes, when, properties or {})


def build_store(data_dir: str) -> Truth:
    """Fill `data_dir` with the timers above (engine closed afterwards); their truth."""
    clock = VirtualClock(T0_MS)
    engine = Engine(Settings(data_dir=data_dir, sync_writes=False), clock, background=False)
    states: dict[str, str] = {}
    specs: dict[str, SendSpec] = {}
    created: dict[str, int] = {}

    def send(batch: list[SendSpec]) -> list[str]:
        ids = [result.message_id for result in engine.send_batch(batch)]
        for message_id, spec in zip(ids, batch, strict=True):
            specs[message_id] = spec
            created[message_id] = clock.now_ms()
            states[message_id] = "SCHEDULED"
        return ids

    fired = send([_spec("audit.log", 64, T0_MS + 2_000) for _ in range(20)])
    clock.advance(SENT_AT_MS - T0_MS)
    engine.run_until_idle()
    for message_id in fired:
        states[message_id] = "FIRED"
    for message_id in engine.ack("audit.log", fired[:5]):
        states[message_id] = "ACKED"

    # Properties are not body: the report's body_bytes must skip them.
    props = [{"trace": "t" * i, "n": str(i)} for i in range(30)]
    send([_spec(TOPICS[i % 4], 32, T0_MS + 10_000 + i * 1_000, props[i]) for i in range(30)])
    send([_spec("orders", 100, HOT_A_MS + (i * 997) % 1_000) for i in range(700)])
    send([_spec("payments", 1_000, HOT_B_MS + (i * 331) % 1_000) for i in range(300)])
    spread = send(
        [_spec(TOPICS[i % 4], 10 * (i % 50), T0_MS + 60_000 + i * 129_600) for i in range(2000)]
    )
    send([_spec("emails", 10, T0_MS + 300 * DAY_MS + i * 7_000) for i in range(50)])
    for message_id in spread[::100]:
        engine.cancel(message_id)
        states[message_id] = "CANCELLED"
    engine.run_until_idle()
    engine.close()

    wheel_of = wheel_membership(data_dir)
    rows = {
        message_id: Row(
            topic=spec.topic,
            deliver_at_ms=spec.when.value,
            created_at_ms=created[message_id],
            body_bytes=len(spec.body),
            state=states[message_id],
            wheel=wheel_of.get(message_id),
        )
        for message_id, spec in specs.items()
    }
    return Truth(rows)


def wheel_membership(data_dir: str) -> dict[str, str]:
    """message id -> wheel, read straight from the wheel column families."""
    database = RocksDatabase(data_dir)
    try:
        found = {}
        for wheel, family in keys.CF_WHEEL.items():
            for raw_key, _ in database.families[family].items():
                found[keys.decode_timer_key(raw_key).message_id] = wheel
        return found
    finally:
        database.close()


def family_contents(data_dir: str) -> dict[str, list[tuple[bytes, bytes]]]:
    """Every (key, value) of each exported column family, in key order."""
    from timerwheel.store.export_files import EXPORTED_FAMILIES

    database = RocksDatabase(data_dir)
    try:
        return {family: list(database.families[family].items()) for family in EXPORTED_FAMILIES}
    finally:
        database.close()


def build_and_export(base, max_rows_per_file: int):
    """The known store under `base/data`, exported to `base/export` in files of at most
    `max_rows_per_file` rows (small, so the export has several slices); returns
    (export dir, ground truth)."""
    truth = build_store(str(base / "data"))
    export_data_dir(str(base / "data"), str(base / "export"), max_rows_per_file=max_rows_per_file)
    return str(base / "export"), truth
