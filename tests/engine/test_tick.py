"""The writer's tick (engine/tick.py) alone, on real RocksDB in a temp dir, in virtual time:
each step staged in bounded chunks, saying when it has more, and when it is next due."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.engines import T0

from timerwheel.engine.ops import WriterContext
from timerwheel.engine.tick import SWEEP_INTERVAL_MS, Tick
from timerwheel.store import keys, records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.open_store import open_store
from timerwheel.store.rocks import RocksTuning
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.scheduler import Scheduler
from timerwheel.wheels.settings import MINUTE_MS, Settings

CHUNK = 2


class Ticking:
    """A store, a scheduler and a tick over them; each `stage` is one group commit's tick."""

    def __init__(self, store: TimerStore, settings: Settings) -> None:
        leads = (settings.minute_cascade_lead_ms, settings.hour_cascade_lead_ms)
        self.store = store
        self.scheduler = Scheduler(
            store.load_state(), leads, settings.fire_tick_ms, settings.cascade_finish_ahead_ms()
        )
        self.tick = Tick(settings, WriterContext(store, self.scheduler, settings.retention_ms))

    def schedule(self, deliver_times_ms: list[int]) -> list[bytes]:
        """New timers of topic "t", committed; their ids, in time order."""
        ids = [f"id-{t:016d}".encode() for t in deliver_times_ms]
        specs = [SendSpec("t", b"body", When(WhenKind.DELIVER_AT, t)) for t in deliver_times_ms]
        wheels = [self.scheduler.placement(t).name for t in deliver_times_ms]
        batch = StagedBatch()
        self.store.stage_schedule_many(
            batch, ids, records.encode_new_many(specs, deliver_times_ms, self.scheduler.now_ms),
            deliver_times_ms, [b"t"] * len(ids), wheels,
        )  # fmt: skip
        self.store.commit(batch, sync=False)
        return ids

    def stage(self, now_ms: int) -> tuple[bool, StagedBatch]:
        now_ms = self.scheduler.observe(now_ms)
        batch = StagedBatch()
        more = self.tick.stage(batch, now_ms)
        self.store.stage_state(batch, self.scheduler.state)
        self.store.commit(batch, sync=False)
        return more, batch

    def wheel_ids(self, wheel: str) -> list[bytes]:
        entries = self.store.scan(wheel, b"", keys.time_bound(2**63 - 1), 10**6)
        return [key[keys.TIME_BYTES :] for key, _ in entries]


def fired_ids(batch: StagedBatch) -> list[bytes]:
    return [message_id for _, message_id, _ in batch.fired_entries.get("t", [])]


@pytest.fixture
def ticking(tmp_path) -> Iterator[Ticking]:
    settings = Settings(
        data_dir=str(tmp_path / "d"), sync_writes=False,
        fire_chunk=CHUNK, cascade_chunk=CHUNK, sweep_chunk=CHUNK,
    )  # fmt: skip
    leads = (settings.minute_cascade_lead_ms, settings.hour_cascade_lead_ms)
    store, _, _ = open_store(
        settings.data_dir, RocksTuning(sync_writes=False), lambda: Scheduler.fresh(T0, leads).state
    )
    try:
        yield Ticking(store, settings)
    finally:
        store.close()


def test_firing_takes_a_chunk_a_commit_in_time_order_and_says_when_more_is_due(ticking):
    ids = ticking.schedule([T0 + 100 + i for i in range(5)])
    assert ticking.wheel_ids("second") == ids
    more, batch = ticking.stage(T0 + 99)
    assert not more and fired_ids(batch) == []  # nothing due yet

    firings = [ticking.stage(T0 + 200) for _ in range(3)]
    assert [more for more, _ in firings] == [True, True, False]
    assert [fired_ids(batch) for _, batch in firings] == [ids[0:2], ids[2:4], ids[4:5]]
    seqs = [seq for _, batch in firings for seq, _, _ in batch.fired_entries["t"]]
    assert seqs == sorted(seqs) and len(set(seqs)) == 5
    assert ticking.wheel_ids("second") == []
    stored = ticking.store.lookup_many(StagedBatch(), ids)
    assert all(records.is_fired(raw) for raw in stored)


def test_a_cascade_chunk_moves_keys_down_and_fires_those_already_due(ticking):
    slot_ms = T0 - T0 % MINUTE_MS + 5 * MINUTE_MS
    ids = ticking.schedule([slot_ms + 1_000, slot_ms + 2_000, slot_ms + 30_000])
    assert ticking.wheel_ids("minute") == ids
    # The writer was away until after two of them were due: the cascade, when it comes,
    # fires those instead of placing them in the past, and moves the third down.
    now_ms = slot_ms + 10_000
    more, batch = ticking.stage(now_ms)
    assert more and fired_ids(batch) == ids[:2]  # the first chunk: both due
    stages = [ticking.stage(now_ms) for _ in range(5)]
    assert all(fired_ids(batch) == [] for _, batch in stages)
    assert ticking.wheel_ids("minute") == [] and ticking.wheel_ids("second") == ids[2:]

    more, batch = ticking.stage(slot_ms + 30_000)
    assert fired_ids(batch) == ids[2:] and not more


def test_the_sweep_removes_expired_records_a_chunk_at_a_time_once_a_second(ticking):
    ids = ticking.schedule([T0 + 10 * MINUTE_MS + i for i in range(5)])
    cancel = StagedBatch()
    raws = ticking.store.lookup_many(cancel, ids)
    for message_id, raw in zip(ids, raws, strict=True):
        wheels = ("second", "minute", "hour")
        ticking.store.stage_cancel(cancel, message_id.decode(), raw, wheels, T0, T0 + 500)
    ticking.store.commit(cancel, sync=False)
    assert ticking.wheel_ids("minute") == [] and ticking.wheel_ids("second") == []

    more, _ = ticking.stage(T0 + 400)  # the first sweep: nothing expired yet
    assert not more and ticking.tick.next_due_ms() <= T0 + 400 + SWEEP_INTERVAL_MS
    more, _ = ticking.stage(T0 + 1_000)  # not a second since the last sweep
    assert not more and _stored(ticking, ids) == 5

    now_ms = T0 + 400 + SWEEP_INTERVAL_MS
    sweeps = [ticking.stage(now_ms)[0] for _ in range(3)]
    assert sweeps == [True, True, False]
    assert _stored(ticking, ids) == 0
    assert now_ms < ticking.tick.next_due_ms() <= now_ms + SWEEP_INTERVAL_MS


def test_next_due_is_the_next_second_wheel_key_until_it_fires(ticking):
    ticking.stage(T0)  # the first sweep, so only timers and cascades are due next
    (message_id,) = ticking.schedule([T0 + 300])
    assert ticking.tick.next_due_ms() == T0 + 300
    _, batch = ticking.stage(T0 + 300)
    assert fired_ids(batch) == [message_id]
    assert ticking.tick.next_due_ms() > T0 + 300


def _stored(ticking: Ticking, ids: list[bytes]) -> int:
    return sum(raw is not None for raw in ticking.store.lookup_many(StagedBatch(), ids))
