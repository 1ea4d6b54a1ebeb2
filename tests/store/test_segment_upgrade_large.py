"""A version-1 store of 12,000 timers, written by the version-1 engine in virtual time (every
state, three topics, the three wheels, client ids, properties), upgraded to the
batch-level layout in batches of 1,000 entries and cut after the fifth: the resumed
upgrade keeps every timer, as the version-1 code answered it."""

from __future__ import annotations

import pytest

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys
from timerwheel.store.batch_store import open_batch_store
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS, Settings

T0 = 1_700_002_800_000 - 30 * MINUTE_MS
TIMERS = 12_000
TOPICS = ("orders", "billing", "mail")


def spec(i: int) -> SendSpec:
    delay_ms = 1_000 + (i * 7_919) % (3 * HOUR_MS)  # seconds to hours: every wheel
    extra: dict = {}
    if i % 50 == 0:
        extra["message_id"] = f"client-{i}"
    if i % 70 == 0:
        extra["properties"] = {"n": str(i)}
    if i % 90 == 0:  # send options: an `extras` entry
        extra["options"] = SendOptions(max_attempts=3)
    return SendSpec(TOPICS[i % 3], f"body {i}".encode(), When(WhenKind.DELAY, delay_ms), **extra)


def fields(timer) -> tuple:
    acked = timer.state is State.ACKED
    return (
        timer.message_id, timer.topic, timer.body, dict(timer.properties), timer.deliver_at_ms,
        timer.created_at_ms, timer.state, timer.when, 0 if acked else timer.fired_at_ms,
        timer.acked_at_ms, timer.cancelled_at_ms,
    )  # fmt: skip


def make_v1(data_dir) -> tuple[dict[str, tuple], dict[State, int]]:
    """The v1 store: (every timer's fields as v1's Get answered, how many in each state)."""
    clock = VirtualClock(T0)
    settings = Settings(data_dir=str(data_dir), sync_writes=False, retention_ms=24 * HOUR_MS)
    engine = Engine(settings, clock, background=False)
    try:
        ids = []
        for first in range(0, TIMERS, 3_000):
            ids += [r.message_id for r in engine.send_batch(map(spec, range(first, first + 3_000)))]
            clock.advance(1)
        for message_id in ids[1::17]:
            engine.cancel(message_id)
        clock.advance(40 * MINUTE_MS)
        engine.run_until_idle()
        for topic in TOPICS:
            fired = [f.timer.message_id for f in engine.fetch_fired(topic, 0, TIMERS)]
            assert engine.ack(topic, fired[::2]) == fired[::2]
        timers = {mid: engine.get(mid) for mid in ids}
    finally:
        engine.close()
    states: dict[State, int] = {}
    for timer in timers.values():
        states[timer.state] = states.get(timer.state, 0) + 1
    return {mid: fields(t) for mid, t in timers.items()}, states


class Cut(RuntimeError):
    pass


def test_a_large_v1_store_upgraded_in_batches_and_cut_keeps_every_timer(tmp_path, monkeypatch):
    data_dir = tmp_path / "data"
    expected, states = make_v1(data_dir)
    assert len(expected) == TIMERS and all(states.get(s, 0) > 500 for s in State if s.value)
    v1 = RocksDatabase(str(data_dir), read_only=True)
    try:
        v1_extras = dict(v1.families[keys.CF_EXTRAS].items())
    finally:
        v1.close()
    assert len(v1_extras) > 100
    real_write = RocksDatabase.write
    writes = [0]

    def failing(self, batch, sync=True):
        if writes[0] == 5:
            raise Cut("the process died after five batches")
        writes[0] += 1
        real_write(self, batch, sync)

    monkeypatch.setattr(RocksDatabase, "write", failing)
    tuning = RocksTuning(sync_writes=False)
    with pytest.raises(Cut):
        open_batch_store(str(data_dir), tuning, upgrade_batch=1_000)
    monkeypatch.undo()
    store = open_batch_store(str(data_dir), tuning, upgrade_batch=1_000)
    try:
        got = {mid: store.reads.get(mid) for mid in expected}
        assert [mid for mid, t in got.items() if t is None] == []
        assert {mid: fields(t) for mid, t in got.items()} == expected
        pending = {t: sum(1 for f in expected.values() if f[1] == t and f[6] is State.SCHEDULED)
                   for t in TOPICS}  # fmt: skip
        assert store.counts.totals() == pending
        assert {t: store.reads.count_pending(t) for t in TOPICS} == pending
        extras = store.database.families[keys.CF_EXTRAS]
        for message_id, value in v1_extras.items():
            found = store.reads.join.get_client_id(message_id.decode())
            assert extras[bk.place_key(found.segment, found.message_index)] == value
        assert len(dict(extras.items())) == len(v1_extras)
    finally:
        store.close()
