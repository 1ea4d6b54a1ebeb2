"""The store's contract for finishing a timer and then forgetting it: a cancel removes every
candidate wheel key, an Ack retires the ready entry of its own topic only; either keeps
the record until its expiry time, when the sweep removes it, in chunks that resume; an
Ack's messages share one expiry entry that the sweep takes whole, and an id finished
twice in one millisecond keeps the ids its first entry named.

Real RocksDB in a temp dir; each test stages into a batch, commits, and reads back
through the store's own read API."""

from __future__ import annotations

from helpers.timer_store import T0, commit, read_ready, schedule, timer, wheel_ids

from timerwheel.common import State
from timerwheel.store import keys


def test_cancel_removes_every_candidate_key_and_schedules_expiry(open_store):
    store = open_store()
    commit(store, lambda b: schedule(store, b, timer("x", T0 + 50), "hour"))
    raw = store.get_record("x")
    commit(store, lambda b: store.stage_cancel(b, "x", raw, ["minute", "hour"], T0 + 1, T0 + 99))
    cancelled = store.get("x")
    assert cancelled.state is State.CANCELLED and cancelled.cancelled_at_ms == T0 + 1
    assert wheel_ids(store, "hour") == [] and wheel_ids(store, "minute") == []
    # Retention: kept until the expiry time, removed by a sweep at it.
    commit(store, lambda b: store.stage_sweep(b, b"", T0 + 98, 10))
    assert store.get("x") is not None
    commit(store, lambda b: store.stage_sweep(b, b"", T0 + 99, 10))
    assert store.get("x") is None


def test_ack_retires_the_ready_entry_of_its_topic_only_and_expires(open_store):
    store = open_store()
    commit(store, lambda b: [schedule(store, b, timer(f"a{i}", T0), "second") for i in range(2)])
    entries = store.scan("second", b"", keys.time_bound(T0 + 1), 10)
    commit(store, lambda b: store.stage_fire(b, "second", entries, 1, T0))

    def ack(batch):
        for other in ("orderz", "order", "orders2"):  # another topic's: untouched
            assert store.stage_acks(batch, other, ["a0"], T0 + 2, T0 + 999) == []
        assert batch.retired == {} and batch.operations == 0
        acked = store.stage_acks(batch, "orders", ["a0", "nope"], T0 + 3, T0 + 1000)
        assert acked == ["a0"] and batch.retired == {"orders": [1]}
        # The batch's own writes come first: acked once, it is no longer FIRED.
        assert store.stage_acks(batch, "orders", ["a0"], T0 + 4, T0 + 1001) == []

    commit(store, ack)
    assert [f.timer.message_id for f in read_ready(store, "orders", 0, 10)] == ["a1"]
    acked = store.get("a0")
    assert acked.state is State.ACKED and acked.acked_at_ms == T0 + 3
    assert store.get("a1").state is State.FIRED
    assert store.count_ready("orders") == 1
    # Retention: the acked record is kept until its expiry time, then swept.
    commit(store, lambda b: store.stage_sweep(b, b"", T0 + 999, 10))
    assert store.get("a0") is not None
    commit(store, lambda b: store.stage_sweep(b, b"", T0 + 1000, 10))
    assert store.get("a0") is None and store.get("a1") is not None


def test_sweep_is_chunked_and_resumable(open_store):
    store = open_store()

    def stage(batch):
        for i in range(5):
            schedule(store, batch, timer(f"s{i}", T0 + 10), "minute")

    commit(store, stage)
    for i in range(5):
        raw = store.get_record(f"s{i}")
        commit(
            store,
            lambda b, i=i, raw=raw: store.stage_cancel(b, f"s{i}", raw, ["minute"], T0, T0 + i),
        )
    resume = []
    commit(store, lambda b: resume.append(store.stage_sweep(b, b"", T0 + 10, 2)))
    assert resume[0] is not None
    assert sum(store.get(f"s{i}") is None for i in range(5)) == 2
    commit(store, lambda b: store.stage_sweep(b, resume[0], T0 + 10, 10))
    assert all(store.get(f"s{i}") is None for i in range(5))


def test_an_ack_retires_its_messages_with_one_expiry_entry_that_the_sweep_takes_whole(open_store):
    store = open_store()
    commit(store, lambda b: [schedule(store, b, timer(f"g{i}", T0), "second") for i in range(3)])
    later = [timer(f"c{i}", T0 + 10) for i in range(2)]
    commit(store, lambda b: [schedule(store, b, t, "minute") for t in later])
    entries = store.scan("second", b"", keys.time_bound(T0 + 1), 10)
    commit(store, lambda b: store.stage_fire(b, "second", entries, 1, T0))
    for i in range(2):  # two cancelled timers, each its own entry, expiring before the Ack's
        raw = store.get_record(f"c{i}")
        commit(store, lambda b, i=i, raw=raw: store.stage_cancel(
            b, f"c{i}", raw, ["minute"], T0, T0 + 50 + i))  # fmt: skip
    acked = ["g0", "g1", "g2"]
    commit(store, lambda b: store.stage_acks(b, "orders", acked, T0 + 2, T0 + 100))

    def expiry_keys():
        return [key for key, _ in store.database.families[keys.CF_EXPIRY].items()]

    ack_key = keys.wheel_key(T0 + 100, "g0")
    assert expiry_keys() == [keys.wheel_key(T0 + 50, "c0"), keys.wheel_key(T0 + 51, "c1"), ack_key]

    def stored():
        return [m for m in ("c0", "c1", *acked) if store.get_record(m) is not None]

    resume = []
    commit(store, lambda b: resume.append(store.stage_sweep(b, b"", T0 + 99, 2)))
    assert resume[-1] is not None and stored() == acked  # the limit: the two cancels
    commit(store, lambda b: resume.append(store.stage_sweep(b, resume[-1], T0 + 99, 2)))
    assert resume[-1] is None and stored() == acked  # the Ack's retention has not ended
    # Its entry names three ids against a limit of two: taken whole, the limit reached.
    commit(store, lambda b: resume.append(store.stage_sweep(b, b"", T0 + 100, 2)))
    assert resume[-1] == ack_key and stored() == [] and expiry_keys() == []
    commit(store, lambda b: resume.append(store.stage_sweep(b, ack_key, T0 + 100, 2)))
    assert resume[-1] is None


def test_an_id_finished_twice_in_one_millisecond_keeps_the_ids_its_first_entry_named(open_store):
    store = open_store()

    def expiry_entries():
        return [
            (key, keys.expiry_entry_ids(key, value))
            for key, value in store.database.families[keys.CF_EXPIRY].items()
        ]

    def send_fire_ack(ids, seq):
        commit(store, lambda b: [schedule(store, b, timer(i, T0), "second") for i in ids])
        entries = store.scan("second", b"", keys.time_bound(T0 + 1), 10)
        commit(store, lambda b: store.stage_fire(b, "second", entries, seq, T0))
        commit(store, lambda b: store.stage_acks(b, "orders", ids, T0 + 2, T0 + 100))

    send_fire_ack(["g0", "g1", "g2"], 1)
    send_fire_ack(["g0"], 4)  # g0 sent again, fired and acked: the same key, T0+100 and g0
    ack_key = keys.wheel_key(T0 + 100, "g0")
    assert expiry_entries() == [(ack_key, [b"g0", b"g1", b"g2"])]
    # Within one batch: an entry staged, then a cancel of its first id at the same time.
    commit(store, lambda b: schedule(store, b, timer("h0", T0 + 500), "minute"))
    raw = store.get_record("h0")

    def stage(batch):
        store.stage_expiry(batch, T0 + 200, [b"h0", b"g1"])
        store.stage_cancel(batch, "h0", raw, ["minute"], T0 + 3, T0 + 200)

    commit(store, stage)
    assert expiry_entries()[-1] == (keys.wheel_key(T0 + 200, "h0"), [b"h0", b"g1"])
    commit(store, lambda b: store.stage_sweep(b, b"", T0 + 100, 10))
    assert [m for m in ("g0", "g1", "g2", "h0") if store.get_record(m) is not None] == ["h0"]
