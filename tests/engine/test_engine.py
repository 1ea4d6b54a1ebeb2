"""The in-process engine over real RocksDB: API semantics, chunking, bounds, timing.

Restart and a failed WAL sync: test_engine_recovery.py."""

from __future__ import annotations

import threading

import pytest
from helpers.engines import T0, delay, engine_factory, wheel_count

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.engine.system_clock import SystemClock
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    SendSpec,
    ShuttingDown,
    When,
    WhenKind,
)
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings


@pytest.fixture
def clock():
    return VirtualClock(T0)


@pytest.fixture
def make_engine(tmp_path, clock):
    with engine_factory(tmp_path / "data", clock) as make:
        yield make


def test_timers_are_placed_by_delay_and_stay_in_the_hour_wheel_beyond_a_day(make_engine):
    engine = make_engine()
    cases = {2_000: "second", 5 * MINUTE_MS: "minute", 3 * HOUR_MS: "hour", 40 * DAY_MS: "hour"}
    for delay_ms, wheel in cases.items():
        result = engine.send(delay(delay_ms))
        timer = engine.get(result.message_id)
        assert (timer.state, timer.wheel, timer.deliver_at_ms) == (
            State.SCHEDULED,
            wheel,
            T0 + delay_ms,
        )


def test_a_time_in_the_past_fires_at_once(make_engine):
    engine = make_engine()
    result = engine.send(SendSpec("orders", b"x", When(WhenKind.DELIVER_AT, T0 - 5_000)))
    assert engine.get(result.message_id).state is State.FIRED
    assert [f.timer.message_id for f in engine.fetch_fired("orders", 0, 10)] == [result.message_id]


def test_bad_input_writes_nothing(make_engine):
    engine = make_engine()
    before = engine.store.database.db.latest_sequence_number()
    with pytest.raises(InvalidArgument, match=r"messages\[1\]\.delay_ms=-5"):
        engine.send_batch([delay(10), delay(-5), delay(20)])
    with pytest.raises(InvalidArgument, match="topic=''"):
        engine.send(delay(10, topic=""))
    assert engine.store.database.db.latest_sequence_number() == before


def test_client_ids_make_sends_idempotent(make_engine):
    engine = make_engine()
    first = engine.send(delay(60_000, message_id="order-7"))
    assert not first.existed
    again = engine.send(delay(60_000, message_id="order-7"))
    assert again == first._replace(existed=True, existing_state=State.SCHEDULED)
    with pytest.raises(AlreadyExists, match="message_id='order-7'"):
        engine.send(
            SendSpec("orders", b"other body", When(WhenKind.DELAY, 60_000), message_id="order-7")
        )
    assert wheel_count(engine, "minute") == 1


def test_a_batch_with_a_conflicting_id_stores_nothing(make_engine):
    engine = make_engine()
    engine.send(delay(60_000, message_id="taken"))
    conflicting = SendSpec("orders", b"different", When(WhenKind.DELAY, 60_000), message_id="taken")
    with pytest.raises(AlreadyExists):
        engine.send_batch([delay(1_000, message_id="fresh"), conflicting])
    with pytest.raises(NotFound):
        engine.get("fresh")


def test_cancel_semantics(make_engine, clock):
    engine = make_engine()
    with pytest.raises(NotFound, match="message_id='nope'"):
        engine.cancel("nope")
    pending = engine.send(delay(10 * MINUTE_MS)).message_id
    assert engine.cancel(pending) is State.CANCELLED
    assert engine.cancel(pending) is State.CANCELLED  # twice is fine
    assert wheel_count(engine, "minute") == 0
    fired = engine.send(delay(1_000)).message_id
    clock.advance(1_000)
    engine.run_until_idle()
    with pytest.raises(FailedPrecondition, match="already FIRED"):
        engine.cancel(fired)
    clock.advance(20 * MINUTE_MS)
    engine.run_until_idle()
    assert (
        engine.fetch_fired("orders", 0, 10)[0].timer.message_id == fired
    )  # cancelled one never fired
    assert len(engine.fetch_fired("orders", 0, 10)) == 1


def test_ack_retires_only_fired_messages_of_that_topic(make_engine, clock):
    engine = make_engine()
    a = engine.send(delay(0)).message_id
    b = engine.send(delay(0, topic="other")).message_id
    later = engine.send(delay(HOUR_MS)).message_id
    assert engine.ack("orders", [a, b, later, "unknown"]) == [a]
    assert engine.ack("orders", [a]) == []
    again = engine.send(delay(0)).message_id
    assert engine.ack("orders", [again, again]) == [again], "a repeated id is acked once"
    assert engine.get(a).state is State.ACKED and engine.get(a).acked_at_ms == T0
    assert [f.timer.message_id for f in engine.fetch_fired("other", 0, 10)] == [b]


def test_list_pages_through_a_time_range_in_time_order(make_engine):
    engine = make_engine()
    delays = [500, 30_000, 5 * MINUTE_MS, 2 * HOUR_MS, 3 * DAY_MS, 90_000]
    ids = {engine.send(delay(d)).message_id: d for d in delays}
    engine.send(delay(1_000, topic="noise"))
    seen, token = [], ""
    while True:
        page, token = engine.list_pending("orders", T0, T0 + 4 * DAY_MS, 2, token)
        seen += page
        if not token:
            break
    assert [t.deliver_at_ms for t in seen] == sorted(T0 + d for d in delays)
    assert {t.message_id for t in seen} == set(ids)
    assert {t.wheel for t in seen} == {"second", "minute", "hour"}
    window, _ = engine.list_pending("orders", T0 + 60_000, T0 + 3 * HOUR_MS, 100)
    assert [t.deliver_at_ms - T0 for t in window] == [90_000, 5 * MINUTE_MS, 2 * HOUR_MS]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("orders", 0, 10, 10, "!!notbase64"), "page_token"),
        (("orders", 0, 10, 10, "AAAA"), "page_token"),
        (("orders", 10, 10, 10, ""), "to_ms"),
        (("orders", -1, 10, 10, ""), "from_ms"),
        (("orders", 0, 10, 5000, ""), "limit"),
        (("bad topic", 0, 10, 10, ""), "topic"),
    ],
)
def test_list_refuses_bad_arguments(make_engine, args, field):
    engine = make_engine()
    with pytest.raises(InvalidArgument) as caught:
        engine.list_pending(*args)
    assert caught.value.field == field


@pytest.mark.system  # a slow run: 200k timers
def test_a_200k_timer_minute_slot_cascades_paced_in_bounded_chunks(make_engine, clock):
    chunk, defaults = 10_000, Settings()
    engine = make_engine(cascade_chunk=chunk, fire_chunk=chunk)
    slot_start = T0 - T0 % MINUTE_MS + 5 * MINUTE_MS
    for start in range(0, 200_000, 10_000):
        engine.send_batch(
            [
                SendSpec("hot", b"", When(WhenKind.DELIVER_AT, slot_start + (i % 60_000)))
                for i in range(start, start + 10_000)
            ]
        )
    assert wheel_count(engine, "minute") == 200_000
    moved_per_batch = []
    stage_move = engine.store.stage_move

    def recording_move(batch, upper, lower, entries, now_ms):
        moved_per_batch.append(len(entries))
        return stage_move(batch, upper, lower, entries, now_ms)

    engine.store.stage_move = recording_move
    clock.advance(slot_start - defaults.minute_cascade_lead_ms - clock.now_ms())
    moved_per_second = []
    minute_finish_ahead_ms, _ = defaults.cascade_finish_ahead_ms()
    while clock.now_ms() <= slot_start - minute_finish_ahead_ms:
        before = len(moved_per_batch)
        engine.run_until_idle()
        moved_per_second.append(sum(moved_per_batch[before:]))
        clock.advance(1_000)
    assert max(moved_per_batch) <= chunk and sum(moved_per_second) == 200_000
    # Paced over the window (timerwheel.wheels.scheduler, "Pacing"): 60 s of timers in 40 steps of
    # 1.5 s each; at most 4 timers a ms, so at most 6,000 a second instead of all at once.
    window_s = (defaults.minute_cascade_lead_ms - minute_finish_ahead_ms) // 1000
    assert len([n for n in moved_per_second if n]) == window_s
    assert max(moved_per_second) == 4 * 1_500
    assert wheel_count(engine, "minute") == 0 and wheel_count(engine, "second") == 200_000
    clock.advance(slot_start + MINUTE_MS - clock.now_ms())  # the whole slot is due
    engine.run_until_idle()
    assert wheel_count(engine, "second") == 0
    assert engine.store.count_ready("hot") == 200_000


def test_backpressure_refuses_rather_than_queueing_without_bound(make_engine):
    engine = make_engine(max_queued_ops=10)
    accepted = engine.send_batch_async([delay(1_000) for _ in range(10)])
    with pytest.raises(Overloaded, match="limit 10"):
        engine.send_batch_async([delay(1_000)])
    engine.run_until_idle()
    assert len(accepted.result()) == 10
    assert wheel_count(engine, "second") == 10


def test_acks_and_cancels_are_queued_past_the_queue_limit_sends_are_not(make_engine):
    """Under overload the excess is refused at the producers: an Ack or a Cancel settles
    work, and refusing it would only bring its message back as more work."""
    engine = make_engine(max_queued_ops=2)
    now, later = engine.send_batch([delay(0, topic="t"), delay(5_000, topic="t")])
    engine.run_until_idle()
    fired = [f.timer.message_id for f in engine.fetch_fired("t", 0, 10)]
    assert fired == [now.message_id]
    queued = [engine.send_batch_async([delay(1_000)]) for _ in range(2)]  # the queue is full
    with pytest.raises(Overloaded):
        engine.send_batch_async([delay(1_000)])
    assert engine.ack("t", fired) == fired  # queued behind the sends, not refused
    assert engine.cancel(later.message_id) == State.CANCELLED
    assert all(f.done() for f in queued)


def test_closed_engine_refuses_new_work(make_engine):
    engine = make_engine()
    engine.close()
    with pytest.raises(ShuttingDown):
        engine.send(delay(1_000))


def test_background_writer_fires_on_the_real_clock_never_early(tmp_path):
    """Real clock, real writer thread: the second wheel is drained continuously, each
    timer at or after its time. How late is the machine's hour (the load-test harness
    measures it); the fire on time in virtual time is the scheduler's tests'."""
    engine = Engine(Settings(data_dir=str(tmp_path / "rt")), SystemClock())
    count = 40
    all_fired = threading.Event()
    seen: set[str] = set()

    def on_fired(topics):
        if "rt" in topics:
            seen.update(f.timer.message_id for f in engine.fetch_fired("rt", 0, 1000))
            if len(seen) >= count:
                all_fired.set()

    engine.add_fired_listener(on_fired)
    try:
        results = engine.send_batch([delay(50 + 10 * i, topic="rt") for i in range(count)])
        assert all_fired.wait(10), f"only {len(seen)} of {count} fired"
        lateness = [engine.get(r.message_id).fired_at_ms - r.deliver_at_ms for r in results]
        assert min(lateness) >= 0, "fired before its time"
        print(f"\nfire lateness on the real clock: max {max(lateness)} ms")
    finally:
        engine.close()


def test_the_fire_tick_sets_when_the_writer_wakes_not_what_is_due(make_engine, clock):
    engine = make_engine(fire_tick_ms=10)
    first, second = engine.send(delay(3)), engine.send(delay(5))
    assert engine.scheduler.next_wakeup_ms(T0 + 3) == T0 + 3  # nothing fired yet: on time
    clock.advance(3)
    engine.run_until_idle()
    assert engine.get(first.message_id).state is State.FIRED
    assert engine.scheduler.next_wakeup_ms(T0 + 5) == T0 + 13  # Settings reach the scheduler
    clock.advance(2)  # within the tick: an iteration now (a request's, say) fires what is due
    engine.run_until_idle()
    assert engine.get(second.message_id).state is State.FIRED
