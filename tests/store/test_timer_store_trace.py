"""The trace column family (timerwheel.store.trace) as the store writes it: events
round-trip their codec and keep their write order per message across reopens; attempts
count again after a dead letter, and a failed attempt counts without its delivery event;
a batch committed twice keys its events once; the retention sweep removes a message's
trace with its record; a cascade and an overdue fire out of an upper wheel are traced.

Real RocksDB in a temp dir; each test stages into a batch, commits, and reads back."""

from __future__ import annotations

from helpers.timer_store import T0, commit, schedule, timer
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store import keys, records
from timerwheel.store import trace as trace_cf
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.trace import TraceEvent, TraceKind


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
