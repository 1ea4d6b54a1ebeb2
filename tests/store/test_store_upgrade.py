"""A store written by an earlier layout opens with today's code: a copy of the committed
`tests/fixtures/store-v1.tar.gz` (made by `tests/fixtures/make_store_v1.py`, which says at
which commit) answers every timer as the code that wrote it did, and what it holds fires,
is delivered and acked afterwards."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.timer_store import timer_fields
from structlog.testing import capture_logs

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.store import keys, upgrade
from timerwheel.store import open_store as open_store_module
from timerwheel.store.integrity import StoreDamaged, StoreRefused
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS, Settings

DAY_MS = 24 * HOUR_MS


def open_engine(data_dir: Path, clock: VirtualClock) -> Engine:
    settings = Settings(data_dir=str(data_dir), sync_writes=False, retention_ms=DAY_MS)
    return Engine(settings, clock, background=False)


def test_a_v1_store_opens_and_answers_as_the_v1_code_did(v1):
    data_dir, expected = v1
    clock = VirtualClock(expected["made_at_ms"])
    engine = open_engine(data_dir, clock)
    try:
        meta = engine.store.database.families[keys.CF_META]
        assert keys.decode_u64(meta[keys.META_SCHEMA_VERSION]) == keys.SCHEMA_VERSION
        for message_id, fields in expected["timers"].items():
            assert timer_fields(engine.get(message_id)) == fields, message_id
        for topic, entries in expected["ready"].items():
            fired = engine.fetch_fired(topic, 0, 100)
            assert [[f.seq, f.timer.message_id] for f in fired] == entries
        assert engine.scheduler.state.fire_seq == expected["fire_seq"]
        assert {t: engine.count(t)[0] for t in expected["counts"]} == expected["counts"]
        pending, _ = engine.list_pending("orders", 0, 2**62, 100)
        assert [t.message_id for t in pending] == expected["pending"]
    finally:
        engine.close()


def test_a_v1_store_fires_delivers_and_acks_afterwards(v1):
    data_dir, expected = v1
    clock = VirtualClock(expected["made_at_ms"])
    engine = open_engine(data_dir, clock)
    try:
        fired_before = [mid for _, mid in expected["ready"]["orders"]]
        assert sorted(engine.ack("orders", fired_before)) == sorted(fired_before)
        assert engine.ack("orders.dlq", ["dead-1"]) == ["dead-1"]
        assert engine.ack("orders", ["acked-1"]) == []  # acked before the upgrade
        for message_id in (*fired_before, "dead-1"):
            timer = engine.get(message_id)
            assert timer.state is State.ACKED and timer.acked_at_ms == clock.now_ms()
        clock.advance(5_000)
        engine.run_until_idle()
        sec = engine.get("sec-1")
        assert sec.state is State.FIRED and sec.fired_at_ms == clock.now_ms()
        assert sec.ready_seq > expected["fire_seq"]
        fired = {f.timer.message_id: f for f in engine.fetch_fired("orders", 0, 100)}
        assert "sec-1" in fired and fired["sec-1"].timer.body == b"body of sec-1"
        assert engine.cancel("min-1") is State.CANCELLED
        clock.advance(5 * HOUR_MS + MINUTE_MS)
        engine.run_until_idle()
        assert engine.get("hour-1").state is State.FIRED
        assert engine.get("min-1").state is State.CANCELLED
        ids = [f.timer.message_id for f in engine.fetch_fired("orders", 0, 1_000)]
        assert "hour-1" in ids and "sec-1" in ids and "min-1" not in ids
        assert any(mid.startswith("series-1#") and mid not in fired_before for mid in ids)
        assert sorted(engine.ack("orders", ids)) == sorted(ids)
        assert engine.fetch_fired("orders", 0, 1_000) == []
        assert engine.get("hour-1").state is State.ACKED
    finally:
        engine.close()


def family_contents(data_dir: Path) -> dict[str, dict[bytes, bytes]]:
    """Every entry of every family of the closed store at `data_dir`."""
    database = RocksDatabase(str(data_dir), read_only=True)
    try:
        return {name: dict(family.items()) for name, family in database.families.items()}
    finally:
        database.close()


def test_a_registered_step_runs_once_in_one_batch_with_the_new_version(v1, monkeypatch):
    """The machinery a layout change plugs into: a step from version 1, seen through the
    staged writes of the steps before it, its writes and `meta`'s new version together."""
    data_dir, expected = v1
    seen: list[bytes] = []

    def step(view: upgrade.UpgradeView, batch) -> None:
        batch.writes[keys.CF_META][b"upgrade.test"] = b"1"
        assert view.get(keys.CF_META, b"upgrade.test") == b"1"
        for message_id, raw in view.items(keys.CF_MESSAGES):
            seen.append(message_id)
            batch.records[message_id] = raw  # the same bytes: answers must not move

    monkeypatch.setattr(keys, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(upgrade.STEPS, 1, step)
    with capture_logs() as logs:
        engine = open_engine(data_dir, VirtualClock(expected["made_at_ms"]))
    try:
        for message_id, fields in expected["timers"].items():
            assert timer_fields(engine.get(message_id)) == fields, message_id
    finally:
        engine.close()
    assert sorted(seen) == sorted(m.encode() for m in expected["timers"])
    upgraded = [entry for entry in logs if entry["event"] == "store_upgraded"]
    assert [(e["from_version"], e["to_version"]) for e in upgraded] == [(1, 2)]
    meta = family_contents(data_dir)[keys.CF_META]
    assert meta[b"upgrade.test"] == b"1"
    assert keys.decode_u64(meta[keys.META_SCHEMA_VERSION]) == 2
    engine = open_engine(data_dir, VirtualClock(expected["made_at_ms"]))  # no second run
    engine.close()
    assert len(seen) == len(expected["timers"])


def test_a_failed_step_changes_nothing_and_refuses_the_start(v1, monkeypatch):
    data_dir, expected = v1
    before = family_contents(data_dir)

    def step(view: upgrade.UpgradeView, batch) -> None:
        batch.writes[keys.CF_META][b"upgrade.test"] = b"1"
        raise ValueError("a record this step cannot read")

    monkeypatch.setattr(keys, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(upgrade.STEPS, 1, step)
    with pytest.raises(ValueError, match="cannot read"):
        open_engine(data_dir, VirtualClock(expected["made_at_ms"]))
    assert family_contents(data_dir) == before


def test_a_version_without_a_step_is_refused_before_any_write(v1, monkeypatch):
    data_dir, expected = v1
    before = family_contents(data_dir)
    monkeypatch.setattr(keys, "SCHEMA_VERSION", 3)
    monkeypatch.setitem(upgrade.STEPS, 2, lambda view, batch: None)  # none from 1
    with pytest.raises(StoreDamaged, match="schema version 1"):
        open_engine(data_dir, VirtualClock(expected["made_at_ms"]))
    assert family_contents(data_dir) == before


def test_a_store_that_needs_an_upgrade_is_refused_when_it_opens_read_only(v1, monkeypatch):
    """A full disk opens a store read-only: nothing can be written, so an older layout
    cannot be upgraded, and is not served in it either."""
    data_dir, _ = v1
    before = family_contents(data_dir)
    monkeypatch.setattr(keys, "SCHEMA_VERSION", 2)
    monkeypatch.setitem(upgrade.STEPS, 1, lambda view, batch: None)
    monkeypatch.setattr(open_store_module, "free_bytes", lambda path: 0)
    with pytest.raises(StoreRefused, match=r"upgrades to 2 .* free space first"):
        open_store_module.open_store(str(data_dir), RocksTuning(), lambda: None)
    assert family_contents(data_dir) == before
