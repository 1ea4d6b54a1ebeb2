"""The store's contract for the wheels: a schedule writes the record and its wheel key in
one batch; a scan is bounded, half-open and limited; a cascade moves keys out of an upper
wheel into a lower one; a fire deletes the key, adds the ready entry in the timer's own
topic and marks the record FIRED, skipping a key whose record is no longer scheduled;
List merges the wheels by time and pages; the ready topics are listed once each.

Real RocksDB in a temp dir; each test stages into a batch, commits, and reads back
through the store's own read API."""

from __future__ import annotations

from dataclasses import replace

from helpers.timer_store import T0, commit, read_ready, schedule, timer, wheel_ids

from timerwheel.common import State
from timerwheel.store import keys, records


def test_schedule_puts_record_and_wheel_key_together(open_store):
    store = open_store()
    commit(store, lambda b: schedule(store, b, timer("a", T0 + 5), "minute"))
    assert store.get("a") == timer("a", T0 + 5)
    assert wheel_ids(store, "minute") == ["a"]
    assert store.find_wheel(store.get("a"), ["second", "minute", "hour"]) == "minute"


def test_scan_is_bounded_half_open_and_limited(open_store):
    store = open_store()

    def stage(batch):
        for i, t in enumerate([T0, T0 + 1, T0 + 1, T0 + 2, T0 + 3]):
            schedule(store, batch, timer(f"id{i}", t), "second")

    commit(store, stage)
    got = store.scan("second", keys.time_bound(T0 + 1), keys.time_bound(T0 + 3), 10)
    assert [keys.key_time_ms(k) for k, _ in got] == [T0 + 1, T0 + 1, T0 + 2]
    assert all(topic == b"orders" for _, topic in got)
    assert len(store.scan("second", b"", keys.time_bound(T0 + 9), 2)) == 2
    assert store.scan("second", keys.time_bound(T0 + 3), keys.time_bound(T0 + 3), 10) == []
    assert store.first_key("second", keys.time_bound(T0 + 2)) == keys.wheel_key(T0 + 2, "id3")


def test_move_takes_keys_out_of_the_upper_wheel_into_the_lower(open_store):
    store = open_store()
    commit(store, lambda b: [schedule(store, b, timer(f"m{i}", T0 + i), "hour") for i in range(3)])
    entries = store.scan("hour", b"", keys.time_bound(T0 + 2), 10)
    commit(store, lambda b: store.stage_move(b, "hour", "minute", entries, 0))
    assert wheel_ids(store, "hour") == ["m2"]
    assert wheel_ids(store, "minute") == ["m0", "m1"]


def test_fire_deletes_the_key_adds_ready_and_marks_fired(open_store):
    store = open_store()
    commit(
        store,
        lambda b: [schedule(store, b, timer(f"f{i}", T0 + i), "second") for i in range(3)],
    )
    entries = store.scan("second", b"", keys.time_bound(T0 + 3), 10)
    batch = commit(store, lambda b: store.stage_fire(b, "second", entries, 10, T0 + 7))
    assert batch.fired == 3 and batch.fired_topics == {"orders"}
    assert wheel_ids(store, "second") == []
    fired = read_ready(store, "orders", 0, 10)
    assert [(f.seq, f.timer.message_id) for f in fired] == [(10, "f0"), (11, "f1"), (12, "f2")]
    assert all(f.timer.state is State.FIRED and f.timer.fired_at_ms == T0 + 7 for f in fired)
    assert read_ready(store, "orders", 11, 10)[0].seq == 12
    size = len(store.get_record("f0"))
    assert [f.seq for f in read_ready(store, "orders", 0, 10, max_bytes=size + 1)] == [10, 11]
    assert [f.seq for f in read_ready(store, "orders", 0, 10, max_bytes=1)] == [10]


def test_fire_skips_keys_whose_record_is_not_scheduled(open_store):
    store = open_store()
    commit(store, lambda b: schedule(store, b, timer("c", T0), "second"))
    raw = store.get_record("c")
    commit(store, lambda b: store.stage_cancel(b, "c", raw, [], T0, T0 + 100))  # key left behind
    entries = store.scan("second", b"", keys.time_bound(T0 + 1), 10)
    batch = commit(store, lambda b: store.stage_fire(b, "second", entries, 1, T0 + 1))
    assert batch.fired == 0 and store.get("c").state is State.CANCELLED
    assert wheel_ids(store, "second") == []
    assert set(batch.count_deltas.values()) <= {0}  # it left its minute's count at the cancel


def test_a_chunk_of_two_topics_and_a_stale_key_fires_each_timer_into_its_own_topic(open_store):
    store = open_store()
    topics = ["orders", "mail", "orders", "mail"]
    sent = [timer(f"t{i}", T0 + i, topic) for i, topic in enumerate(topics)]
    commit(store, lambda b: [schedule(store, b, t, "second") for t in sent])
    raw = store.get_record("t1")
    commit(store, lambda b: store.stage_cancel(b, "t1", raw, [], T0, T0 + 100))  # key left behind
    entries = store.scan("second", b"", keys.time_bound(T0 + 4), 10)
    batch = commit(store, lambda b: store.stage_fire(b, "second", entries, 5, T0 + 9))
    assert batch.fired == 3 and batch.fired_topics == {"orders", "mail"}
    assert [(f.seq, f.timer.message_id) for f in read_ready(store, "orders", 0, 10)] == [
        (5, "t0"),
        (6, "t2"),
    ]
    assert [(f.seq, f.timer.message_id) for f in read_ready(store, "mail", 0, 10)] == [(7, "t3")]
    assert all(store.get(t.message_id).state is State.FIRED for t in sent if t.message_id != "t1")
    assert sorted(batch.count_deltas.values()) == [-2, -1]  # t1 left its count at the cancel


def test_fire_new_needs_no_wheel_key(open_store):
    store = open_store()
    fired = replace(timer("now", T0), state=State.FIRED, ready_seq=4)
    raw = records.encode_timer(fired)
    commit(store, lambda b: store.stage_fire_new(b, b"now", raw, "orders", 4))
    assert [f.timer.message_id for f in read_ready(store, "orders", 0, 10)] == ["now"]
    assert all(wheel_ids(store, w) == [] for w in ("second", "minute", "hour"))


def test_list_pending_merges_wheels_by_time_filters_topic_and_pages(open_store):
    store = open_store()
    layout = [
        ("second", T0 + 1),
        ("minute", T0 + 60_000),
        ("hour", T0 + 7_200_000),
        ("minute", T0 + 120_000),
    ]

    def stage(batch):
        for i, (wheel, t) in enumerate(layout):
            schedule(store, batch, timer(f"p{i}", t), wheel)
            schedule(store, batch, timer(f"q{i}", t, topic="other"), wheel)

    commit(store, stage)
    page = store.list_pending("orders", T0, T0 + 10**8, 3, None, {}, 1000)
    assert [t.message_id for t in page.timers] == ["p0", "p1", "p3"]
    rest = store.list_pending("orders", T0, T0 + 10**8, 3, page.next_after, {}, 1000)
    assert [t.message_id for t in rest.timers] == ["p2"] and rest.next_after is None
    window = store.list_pending("orders", T0 + 60_000, T0 + 120_000, 10, None, {}, 1000)
    assert [t.message_id for t in window.timers] == ["p1"]
    budget = store.list_pending("orders", T0, T0 + 10**8, 10, None, {}, 3)
    assert budget.next_after is not None and len(budget.timers) <= 2


def test_ready_topics_lists_each_topic_once(open_store):
    store = open_store()

    def stage(batch):
        for i, topic in enumerate(["b", "a", "a", "ab"]):
            schedule(store, batch, timer(f"r{i}", T0, topic=topic), "second")

    commit(store, stage)
    entries = store.scan("second", b"", keys.time_bound(T0 + 1), 10)
    commit(store, lambda b: store.stage_fire(b, "second", entries, 1, T0))
    assert store.ready_topics() == ["a", "ab", "b"]
