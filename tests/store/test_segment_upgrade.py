"""A version-1 store opened by `open_batch_store` is upgraded to the batch-level layout
(decision 0014, step 5, `timerwheel.store.segment_upgrade`): a copy of the committed
`tests/fixtures/store-v1.tar.gz` answers every timer through the version-2 readers as the
version-1 code did, what it holds fires and is acked once through `BatchStore.acker` by
the version-1 ids, and an upgrade cut short after any batch resumes to the same bytes."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from helpers.timer_store import V1_FIXTURE, timer_fields
from rocksdict import Rdict

from timerwheel.common import State
from timerwheel.store import batch_keys as bk
from timerwheel.store import keys, records, segment_upgrade
from timerwheel.store.batch import StagedBatch
from timerwheel.store.batch_store import BatchStore, new_batch, open_batch_store
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.segments import SegmentView
from timerwheel.store.trace import decode_event
from timerwheel.wheels.domain import Timer, When, WhenKind
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS
from timerwheel.wheels.trace import TraceEvent, TraceKind

TUNING = RocksTuning(sync_writes=False)
SERIES = "series-1"


def zeros(n: int) -> bytes:
    """Random parts that make two upgrades of one store byte for byte comparable."""
    return bytes(n)


def contents(data_dir: Path) -> dict[str, dict[bytes, bytes]]:
    """Every entry of every family of the closed store at `data_dir`."""
    names = tuple(name for name in Rdict.list_cf(str(data_dir)) if name != "default")
    database = RocksDatabase(str(data_dir), read_only=True, column_families=names)
    try:
        return {name: dict(family.items()) for name, family in database.families.items()}
    finally:
        database.close()


def v1_fields(fields: dict) -> dict:
    """What a v2 Get must answer of a v1 timer. An ACKED one reports no fired-at (the
    join's rule, step 1b), and `ready_seq` names a v2 fire chunk."""
    out = {k: v for k, v in fields.items() if k != "ready_seq"}
    if fields["state"] == "ACKED":
        out["fired_at_ms"] = 0
    return out


def v2_fields(timer) -> dict:
    return {k: v for k, v in timer_fields(timer).items() if k != "ready_seq"}


def check_answers(store: BatchStore, expected: dict) -> None:
    for message_id, fields in expected["timers"].items():
        if message_id == SERIES:
            assert store.reads.get(message_id) is None  # kept in `series`, below
            continue
        timer = store.reads.get(message_id)
        assert timer is not None, message_id
        assert v2_fields(timer) == v1_fields(fields), message_id


def test_a_v1_store_upgrades_and_answers_every_timer_as_the_v1_code_did(v1):
    data_dir, expected = v1
    before = contents(data_dir)
    store = open_batch_store(str(data_dir), TUNING, upgrade_batch=2)
    try:
        check_answers(store, expected)
        dead = store.reads.join.get_client_id("dead-1")
        # the series occurrence and what is pending, as v1 counted them but the series
        assert store.counts.totals() == {"orders": expected["counts"]["orders"] - 1}
        assert store.reads.count_pending("orders") == 3
        meta = store.database.families[keys.CF_META]
        assert keys.decode_u64(meta[keys.META_SCHEMA_VERSION]) == 2
        assert meta.get(segment_upgrade.META_UPGRADING) is None
        assert meta.get(keys.META_FIRE_SEQ) is None and meta.get(keys.META_NOW_MS) is None
    finally:
        store.close()
    after = contents(data_dir)
    assert keys.CF_MESSAGES not in after
    series_id = SERIES.encode()
    assert after[bk.CF_SERIES][series_id] == before[keys.CF_MESSAGES][series_id]
    assert after[bk.CF_SERIES][series_id + b"\x00extras"] == before[keys.CF_EXTRAS][series_id]
    # every extras entry of a message is under its (segment, index), with its bytes
    moved = {v for k, v in before[keys.CF_EXTRAS].items() if k != series_id}
    assert set(after[keys.CF_EXTRAS].values()) == moved
    assert all(key[0] == 0 and len(key) == 10 for key in after[keys.CF_EXTRAS])
    # dead-1's trace (its delivery and its dead-letter move) under its (segment, index)
    assert sorted(after[keys.CF_TRACE].values()) == sorted(before[keys.CF_TRACE].values())
    assert sorted(bk.decode_trace_key(key) for key in after[keys.CF_TRACE]) == [
        (dead.segment, dead.message_index, 0),
        (dead.segment, dead.message_index, 1),
    ]
    # no version-1 key is left in the families both layouts have
    for family in (*keys.CF_WHEEL.values(), keys.CF_EXPIRY):
        assert all(len(key) == 16 and key[8] == 0 for key in after[family]), family


def test_what_a_v1_store_holds_fires_and_is_acked_once_by_its_v1_ids(v1):
    data_dir, expected = v1
    now = expected["made_at_ms"]
    store = open_batch_store(str(data_dir), TUNING)
    delivered: list[str] = []

    def fire(at_ms: int) -> None:
        while True:
            batch = new_batch()
            fired = store.acker.stage_fire(batch, at_ms, 100)
            store.commit(batch)
            for chunk in fired.chunks:
                for seq, index in zip(chunk.segments, chunk.indexes, strict=True):
                    delivered.append(_client_id(store, seq, index))  # its v1 id
            if not fired.more:
                return

    def ack(message_ids: list[str], at_ms: int):
        batch = new_batch()
        acked = store.acker.stage_ack(batch, [m.encode() for m in message_ids], at_ms)
        store.commit(batch)
        return acked

    try:
        fired_before = [mid for _, mid in expected["ready"]["orders"]] + ["dead-1"]
        acked = ack([*fired_before, "acked-1", "no-such-id"], now)
        assert (acked.acked, acked.refused) == (len(fired_before), [5, 6])
        for message_id in fired_before:
            timer = store.reads.get(message_id)
            assert timer.state is State.ACKED and timer.acked_at_ms == now
        assert ack(["fired-1"], now).refused == [0]  # once
        fire(now + 5_000)
        assert delivered == ["sec-1"]
        batch = new_batch()
        assert store.overrides.stage_cancel(batch, "min-1", now + 5_000) is State.SCHEDULED
        store.commit(batch)
        fire(now + 5 * HOUR_MS + MINUTE_MS)
        assert delivered == ["sec-1", "hour-1"]
        assert store.reads.get("min-1").state is State.CANCELLED
        assert ack(delivered, now + 6 * HOUR_MS).acked == 2
        assert store.reads.get("hour-1").state is State.ACKED
        assert store.counts.totals() == {}
    finally:
        store.close()


def _client_id(store: BatchStore, seq: int, index: int) -> str:
    view = SegmentView(store.database.families[bk.CF_SEGMENTS][bk.segment_key(seq)])
    extras = view.extras(index)
    assert extras is not None and extras.client_id is not None
    return extras.client_id


def clean_upgrade(tmp_path: Path) -> tuple[int, dict]:
    """(batches, families) of an upgrade of the fixture in 2-entry batches, uncut."""
    with tarfile.open(V1_FIXTURE) as archive:
        archive.extractall(tmp_path / "clean", filter="data")
    data_dir = tmp_path / "clean" / "data"
    database = RocksDatabase(
        str(data_dir), TUNING, column_families=segment_upgrade.UPGRADE_FAMILIES
    )
    try:
        batches = segment_upgrade.upgrade_v1(
            database, segment_max=1024, retention_ms=HOUR_MS, randbytes=zeros, batch_messages=2
        )
    finally:
        database.close()
    return batches, contents(data_dir)


class Cut(RuntimeError):
    pass


def test_an_upgrade_cut_after_any_batch_resumes_to_the_same_bytes(v1, tmp_path, monkeypatch):
    batches, clean = clean_upgrade(tmp_path)
    assert batches > 8  # each phase took a batch or more: the cuts fall everywhere
    data_dir, expected = v1
    pristine = contents(data_dir)
    real_write = RocksDatabase.write
    for cut in range(batches):  # the batches written before the failing one
        copy = tmp_path / f"cut{cut}"
        with tarfile.open(V1_FIXTURE) as archive:
            archive.extractall(copy, filter="data")
        writes = [0]

        def failing(self, batch, sync=True, writes=writes, cut=cut):
            if writes[0] == cut:
                raise Cut(f"the disk went away after {cut} batches")
            writes[0] += 1
            real_write(self, batch, sync)

        monkeypatch.setattr(RocksDatabase, "write", failing)
        with pytest.raises(Cut):
            open_batch_store(str(copy / "data"), TUNING, randbytes=zeros, upgrade_batch=2,
                             retention_ms=HOUR_MS)  # fmt: skip
        monkeypatch.setattr(RocksDatabase, "write", real_write)
        if cut == 0:
            # the upgrade's families were created empty; no entry was written
            assert {k: v for k, v in contents(copy / "data").items() if v} == pristine
        else:
            assert keys.CF_MESSAGES in Rdict.list_cf(str(copy / "data"))
        store = open_batch_store(str(copy / "data"), TUNING, randbytes=zeros, upgrade_batch=2,
                                 retention_ms=HOUR_MS)  # fmt: skip
        try:
            check_answers(store, expected)
        finally:
            store.close()
        assert contents(copy / "data") == clean, f"cut after {cut} batches"


def test_an_upgrade_stopped_before_the_old_family_went_drops_it_at_the_next_open(v1, monkeypatch):
    data_dir, expected = v1
    calls = []

    def stopped(database) -> None:
        calls.append(database.path)
        raise Cut("stopped after the last batch")

    monkeypatch.setattr(segment_upgrade, "drop_messages", stopped)
    with pytest.raises(Cut):
        open_batch_store(str(data_dir), TUNING)
    assert keys.CF_MESSAGES in Rdict.list_cf(str(data_dir)) and calls
    monkeypatch.undo()
    store = open_batch_store(str(data_dir), TUNING)
    try:
        check_answers(store, expected)
    finally:
        store.close()
    assert keys.CF_MESSAGES not in Rdict.list_cf(str(data_dir))


def test_a_scheduled_timer_due_before_the_last_fired_one_is_fired_by_the_upgrade(tmp_path):
    """Y (SCHEDULED, due at 5 s) lies before X's place (FIRED, due at 10 s), where the
    join's rule would read it FIRED with no `ready` chunk to Ack it by: the upgrade fires
    it at the v1 clock (15 s), never before it was due; Z (due at 20 s) stays pending.
    Records no entry agrees with are kept too: F and G (FIRED, no `ready` entry) after
    and before the cursor, S (SCHEDULED, in no wheel), R (SCHEDULED, a `ready` entry)."""
    t0, data_dir = 1_700_000_000_000, str(tmp_path / "v1")

    def record(message_id: str, deliver_ms: int, state: State, ready_seq: int = 0) -> bytes:
        fired_ms = deliver_ms if state is State.FIRED else 0
        return records.encode_timer(Timer(
            message_id, "orders", message_id.encode(), {}, deliver_ms, t0, state,
            When(WhenKind.DELAY, deliver_ms - t0), fired_at_ms=fired_ms, ready_seq=ready_seq,
        ))  # fmt: skip

    database = RocksDatabase(data_dir, TUNING)
    batch = StagedBatch()
    writes = batch.writes
    writes[keys.CF_MESSAGES].update({
        b"X": record("X", t0 + 10_000, State.FIRED, 1),
        b"Y": record("Y", t0 + 5_000, State.SCHEDULED),
        b"Z": record("Z", t0 + 20_000, State.SCHEDULED),
        b"F": record("F", t0 + 12_000, State.FIRED),
        b"G": record("G", t0 + 8_000, State.FIRED),
        b"S": record("S", t0 + 30_000, State.SCHEDULED),
        b"R": record("R", t0 + 25_000, State.SCHEDULED),
        b"A": records.as_acked(  # acked, with its first delivery (records version 2)
            record("A", t0 + 1_000, State.FIRED, 0), t0 + 3_000,
            records.first_delivery_trailer(t0 + 2_000, "worker-7"),
        ),
    })  # fmt: skip
    writes[keys.CF_EXPIRY][keys.expiry_entry(t0 + HOUR_MS, [b"A"])[0]] = b""
    writes[keys.CF_READY][keys.ready_key("orders", 1)] = b"X"
    writes[keys.CF_READY][keys.ready_key("orders", 2)] = b"R"
    writes[keys.CF_WHEEL["second"]].update(
        {keys.wheel_key(t0 + 5_000, "Y"): b"orders", keys.wheel_key(t0 + 20_000, "Z"): b"orders"}
    )
    writes[keys.CF_META].update({
        keys.META_SCHEMA_VERSION: keys.encode_u64(1),
        keys.META_NOW_MS: keys.encode_u64(t0 + 15_000), keys.META_FIRE_SEQ: keys.encode_u64(2),
    })  # fmt: skip
    database.write(batch.to_write_batch(database.handles))
    database.close()
    store = open_batch_store(data_dir, TUNING)
    try:
        x, y, z = (store.reads.get(m) for m in ("X", "Y", "Z"))
        assert (x.state, x.fired_at_ms) == (State.FIRED, t0 + 10_000)
        assert (y.state, y.fired_at_ms) == (State.FIRED, t0 + 15_000)
        assert (z.state, z.wheel) == (State.SCHEDULED, "second")
        for message_id in ("F", "S", "R"):
            assert store.reads.get(message_id).state is State.SCHEDULED, message_id
        g = store.reads.get("G")
        assert (g.state, g.fired_at_ms) == (State.FIRED, t0 + 8_000)
        a = store.reads.join.get_client_id("A")
        assert (a.state, a.acked_at_ms) == (State.ACKED, t0 + 3_000)
        assert store.reads.get("A").body == b"A"  # the trailer is no part of it
        traced = dict(store.database.families[keys.CF_TRACE].items())
        assert [bk.decode_trace_key(k)[:2] for k in traced] == [(a.segment, a.message_index)]
        assert [decode_event(v) for v in traced.values()] == [TraceEvent(
            TraceKind.DELIVERED, t0 + 2_000, attempt=1, subscriber="worker-7"
        )]  # fmt: skip
        expiry_family = store.database.families[keys.CF_EXPIRY]
        expiry = [bk.decode_expiry_key(k) for k, _ in expiry_family.items()]
        assert expiry == [(t0 + HOUR_MS, a.segment)]  # its v1 expiry time
        assert store.counts.totals() == {"orders": 4}  # Z, F, S, R
        ack = new_batch()
        assert store.acker.stage_ack(ack, [b"Y", b"X", b"G"], t0 + 16_000).acked == 3
        store.commit(ack)

        def fire(at_ms: int) -> list[str]:
            batch = new_batch()
            chunks = store.acker.stage_fire(batch, at_ms, 10).chunks
            store.commit(batch)
            return [
                _client_id(store, seq, index)
                for c in chunks
                for seq, index in zip(c.segments, c.indexes, strict=True)
            ]

        assert fire(t0 + 20_000) == ["F", "Z"]
        assert fire(t0 + 30_000) == ["R", "S"]
        assert store.counts.totals() == {}
    finally:
        store.close()
