"""Contract suite for the store: what every operation leaves in RocksDB.

Real RocksDB in a temp dir; each test stages into a batch, commits, and reads back
through the store's own read API (and reopens where durability is the point).
"""

from __future__ import annotations

import tempfile
from dataclasses import replace

import pytest
from helpers.budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from timerwheel.common import State
from timerwheel.store import keys, records
from timerwheel.store import trace as trace_cf
from timerwheel.store.batch import StagedBatch
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import Timer, When, WhenKind
from timerwheel.wheels.scheduler import CascadeState, SchedulerState, TimerKey
from timerwheel.wheels.trace import TraceEvent, TraceKind

T0 = 1_700_000_000_000


def read_ready(store, topic: str, after_seq: int, limit: int, max_bytes: int = 0):
    return records.decode_fired(store.read_ready_raw(topic, after_seq, limit, max_bytes))


@pytest.fixture
def open_store(tmp_path):
    opened = []

    def _open() -> TimerStore:
        store = TimerStore(RocksDatabase(str(tmp_path / "db"), RocksTuning(sync_writes=False)))
        opened.append(store)
        return store

    yield _open
    for store in opened:
        if hasattr(store, "_messages"):
            store.close()


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


def test_overlay_shows_what_the_batch_staged(open_store):
    store = open_store()
    batch = StagedBatch()
    schedule(store, batch, timer("o", T0), "second")
    assert store.lookup(batch, b"o") is not None
    assert store.get_record("o") is None  # not committed yet
    store.commit(batch)
    assert store.get_record("o") is not None


def test_a_send_then_cancel_in_one_batch_leaves_the_cancel(open_store):
    store = open_store()
    batch = StagedBatch()
    schedule(store, batch, timer("c", T0 + 90_000), "minute")
    raw = store.lookup(batch, b"c")
    store.stage_cancel(batch, "c", raw, ["minute"], T0, T0 + 1_000)
    store.commit(batch)
    assert store.get("c").state is State.CANCELLED
    assert wheel_ids(store, "minute") == []


_writes = st.lists(
    st.tuples(
        st.sampled_from([keys.CF_WHEEL["hour"], keys.CF_META]),
        st.binary(min_size=1, max_size=3),
        st.one_of(st.none(), st.binary(max_size=4)),  # None: delete
    ),
    max_size=40,
)


@settings(max_examples=examples(40), deadline=None)
@given(committed=_writes, staged=_writes)
def test_a_batch_commits_as_if_its_writes_were_applied_in_order(committed, staged):
    """A batch keeps each key's last write and commits each family sorted: the outcome
    must equal applying every put and delete in the order staged, over what was there."""
    model: dict[tuple[str, bytes], bytes] = {}
    with tempfile.TemporaryDirectory() as data_dir:
        store = TimerStore(RocksDatabase(data_dir, RocksTuning(sync_writes=False)))
        try:
            for writes in (committed, staged):
                batch = StagedBatch()
                for family, key, value in writes:
                    batch.writes[family][key] = value
                    if value is None:
                        model.pop((family, key), None)
                    else:
                        model[(family, key)] = value
                store.commit(batch)
            stored = {
                (family, key): value
                for family in (keys.CF_WHEEL["hour"], keys.CF_META)
                for key, value in store.database.families[family].items()
            }
        finally:
            store.close()
    assert stored == model


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


def test_scheduler_state_and_data_survive_reopen(open_store):
    store = open_store()
    cascades = (CascadeState(T0 + 60_000, TimerKey(T0 + 1, "z")), CascadeState(T0 + 3_600_000))
    state = SchedulerState(T0, cascades, fire_from=TimerKey(T0 - 5, "a"), fire_seq=42)
    assert store.load_state() is None

    def stage(batch):
        schedule(store, batch, timer("keep", T0 + 9), "hour")
        store.stage_state(batch, state)

    commit(store, stage)
    store.close()
    reopened = open_store()
    assert reopened.load_state() == state
    assert reopened.get("keep") == timer("keep", T0 + 9)
    # A finished cascade clears its pending key.
    done = SchedulerState(
        T0, (CascadeState(T0 + 60_000), CascadeState(T0 + 3_600_000)), state.fire_from, 42
    )
    commit(reopened, lambda b: reopened.stage_state(b, done))
    assert reopened.load_state() == done


def test_state_stages_only_the_values_that_changed_since_the_last_commit(open_store):
    store = open_store()
    cascades = (CascadeState(T0 + 60_000, TimerKey(T0 + 1, "z")), CascadeState(T0 + 3_600_000))
    first = SchedulerState(T0, cascades, fire_from=TimerKey(T0 - 5, "a"), fire_seq=42)
    whole = commit(store, lambda b: store.stage_state(b, first))
    assert len(whole.writes[keys.CF_META]) == 8  # the first commit of a store writes them all

    ticked = replace(first, now_ms=T0 + 4, fire_from=TimerKey(T0 + 4, "b"))
    batch = commit(store, lambda b: store.stage_state(b, ticked))
    assert set(batch.writes[keys.CF_META]) == {keys.META_NOW_MS, keys.META_FIRE_FROM}
    same = commit(store, lambda b: store.stage_state(b, ticked))
    assert same.writes[keys.CF_META] == {}

    # A cascade that finishes deletes its pending key once, not at every commit after.
    finished = replace(ticked, cascades=(CascadeState(T0 + 60_000), cascades[1]))
    batch = commit(store, lambda b: store.stage_state(b, finished))
    assert batch.writes[keys.CF_META] == {keys.meta_pending("second"): None}
    assert commit(store, lambda b: store.stage_state(b, finished)).writes[keys.CF_META] == {}

    store.close()
    assert open_store().load_state() == finished  # what was left out was on disk already


def test_state_is_staged_whole_after_a_failed_commit_and_after_a_reopen(open_store, monkeypatch):
    store = open_store()
    cascades = (CascadeState(T0 + 60_000), CascadeState(T0 + 3_600_000))
    state = SchedulerState(T0, cascades, fire_from=TimerKey(T0, ""), fire_seq=1)
    commit(store, lambda b: store.stage_state(b, state))

    def refused(write_batch, sync):
        raise OSError("refused")

    with monkeypatch.context() as patched:
        patched.setattr(store.database, "write", refused)
        with pytest.raises(OSError):
            commit(store, lambda b: store.stage_state(b, replace(state, now_ms=T0 + 1)))
    # The store cannot tell what of a failed batch reached the disk: all of it again.
    again = commit(store, lambda b: store.stage_state(b, replace(state, now_ms=T0 + 2)))
    assert len(again.writes[keys.CF_META]) == 8

    store.reopen()
    after_reopen = commit(store, lambda b: store.stage_state(b, replace(state, now_ms=T0 + 3)))
    assert len(after_reopen.writes[keys.CF_META]) == 8
    assert store.load_state() == replace(state, now_ms=T0 + 3)


# -- the trace column family (timerwheel.store.trace) -------------------------------------------
def trace_event(kind: TraceKind, at_ms: int, **fields) -> TraceEvent:
    return TraceEvent(kind, at_ms, **fields)


@given(
    kind=st.sampled_from(list(TraceKind)),
    at_ms=st.integers(0, 2**62),
    wheels=st.sampled_from(["", "second", "minute", "hour"]),
    attempt=st.integers(0, 65_535),
    text=st.text(max_size=40),
)
def test_trace_events_round_trip(kind, at_ms, wheels, attempt, text):
    delivered = kind is TraceKind.DELIVERED
    event = TraceEvent(
        kind, at_ms, wheel=wheels, from_wheel=wheels, attempt=attempt,
        subscriber=text if delivered else "", detail="" if delivered else text,
        deliver_at_ms=at_ms // 2,
    )  # fmt: skip
    assert trace_cf.decode_event(trace_cf.encode_event(event)) == event


def stage_events(batch: StagedBatch, message_id: str, *events: TraceEvent) -> None:
    batch.trace.extend((message_id.encode(), trace_cf.encode_event(e)) for e in events)


def test_trace_events_keep_their_write_order_per_message_across_reopens(open_store):
    store = open_store()
    first = trace_event(TraceKind.DELIVERED, 9, attempt=1, subscriber="s1")
    commit(store, lambda b: stage_events(b, "a", first, trace_event(TraceKind.NACKED, 5)))
    commit(store, lambda b: stage_events(b, "ab", trace_event(TraceKind.CANCELLED, 1)))
    store.close()
    store = open_store()  # the seq counter comes back from meta: later events sort after
    second = trace_event(TraceKind.DELIVERED, 3, attempt=2, subscriber="s2")
    commit(store, lambda b: stage_events(b, "a", second))
    assert store.trace.read("a") == [first, trace_event(TraceKind.NACKED, 5), second]
    assert store.trace.read("ab") == [trace_event(TraceKind.CANCELLED, 1)]  # "a" is a prefix
    assert store.trace.read("b") == []
    assert store.trace.attempts(["a", "ab", "b"]) == {"a": 2}


def test_attempts_count_again_after_a_dead_letter(open_store):
    store = open_store()
    commit(store, lambda b: stage_events(
        b, "d", trace_event(TraceKind.DELIVERED, 1, attempt=3),
        trace_event(TraceKind.DEAD_LETTERED, 2, detail="q.dlq"),
        trace_event(TraceKind.DELIVERED, 3, attempt=1),
    ))  # fmt: skip
    assert store.trace.attempts(["d"]) == {"d": 1}


def test_a_failed_attempt_counts_as_made_without_its_delivery_event(open_store):
    store = open_store()  # trace_first_deliveries off: attempt 1 only as its failure
    commit(store, lambda b: stage_events(b, "n", trace_event(TraceKind.NACKED, 4, attempt=1)))
    assert store.trace.attempts(["n"]) == {"n": 1}


def test_a_batch_committed_twice_keys_its_events_once(open_store):
    store = open_store()
    batch = StagedBatch()
    stage_events(batch, "x", trace_event(TraceKind.NACKED, 1))
    store.commit(batch)
    store.commit(batch)  # a retried commit writes the same keys again
    assert len(store.trace.read("x")) == 1


def test_the_retention_sweep_removes_a_messages_trace_with_its_record(open_store):
    store = open_store()
    acked = records.as_acked(records.encode_timer(timer("gone", T0)), T0 + 1)
    kept = records.as_acked(records.encode_timer(timer("kept", T0)), T0 + 1)

    def stage(batch):
        batch.records[b"gone"] = acked
        batch.records[b"kept"] = kept
        batch.writes[keys.CF_EXPIRY][keys.wheel_key(T0 + 10, "gone")] = b""
        batch.writes[keys.CF_EXPIRY][keys.wheel_key(T0 + 99, "kept")] = b""
        stage_events(batch, "gone", trace_event(TraceKind.DELIVERED, T0, attempt=1))
        stage_events(batch, "kept", trace_event(TraceKind.DELIVERED, T0, attempt=1))

    commit(store, stage)
    commit(store, lambda b: store.stage_sweep(b, b"", T0 + 50, 100))
    assert store.get_record("gone") is None and store.trace.read("gone") == []
    assert len(store.trace.read("kept")) == 1


def test_a_cascade_and_an_overdue_fire_out_of_an_upper_wheel_are_traced(open_store):
    store = open_store()
    commit(store, lambda b: [schedule(store, b, timer(f"c{i}", T0 + i), "hour") for i in range(3)])
    entries = store.scan("hour", b"", keys.time_bound(T0 + 3), 10)
    commit(store, lambda b: store.stage_move(b, "hour", "minute", entries[1:], T0 - 5))
    commit(store, lambda b: store.stage_fire(b, "hour", entries[:1], 1, T0 + 20))
    moved = TraceEvent(TraceKind.CASCADED, T0 - 5, wheel="minute", from_wheel="hour")
    assert store.trace.read("c1") == store.trace.read("c2") == [moved]
    assert store.trace.read("c0") == [TraceEvent(TraceKind.FIRED, T0 + 20, wheel="hour")]
