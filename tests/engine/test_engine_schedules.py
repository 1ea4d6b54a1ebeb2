"""Schedules through the engine, in virtual time on real RocksDB (issue 78, "Schedules"):
a cancelled id used again with REPLACE, the first send time kept in the trace through
REPLACEs, bounded catch-up of missed occurrences, and pausing and resuming a series.
The engine runs without threads: every fire happens inside `run_until_idle`, so a time
"while the server was down" is the clock moved on without running the writer."""

from __future__ import annotations

import pytest
from helpers.engines import T0, engine_factory

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import (
    AlreadyExists,
    FailedPrecondition,
    IfExists,
    InvalidArgument,
    MissedPolicy,
    NotFound,
    Repeat,
    SendOptions,
    SendSpec,
    When,
    WhenKind,
)
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS, SECOND_MS
from timerwheel.wheels.trace import TraceKind as K

REPLACE = IfExists.REPLACE


@pytest.fixture
def world(tmp_path):
    clock = VirtualClock(T0)
    with engine_factory(tmp_path / "data", clock) as make:
        yield clock, make


def series(
    series_id: str, body: bytes = b"tick", every_ms: int = MINUTE_MS, delay_ms: int = MINUTE_MS,
    if_exists: IfExists = IfExists.REJECT, **repeat,
) -> SendSpec:  # fmt: skip
    options = SendOptions(repeat=Repeat(every_ms=every_ms, **repeat))
    when = When(WhenKind.DELAY, delay_ms)
    return SendSpec("jobs", body, when, {}, series_id, if_exists, options)


def one_shot(message_id: str, body: bytes, delay_ms: int, if_exists=IfExists.REJECT) -> SendSpec:
    return SendSpec("jobs", body, When(WhenKind.DELAY, delay_ms), {}, message_id, if_exists)


def run(clock: VirtualClock, engine: Engine, ms: int, step_ms: int = SECOND_MS) -> None:
    """Time passes with the writer running: each moment's work done as it comes."""
    end_ms = clock.now_ms() + ms
    while clock.now_ms() < end_ms:
        clock.advance(min(step_ms, end_ms - clock.now_ms()))
        engine.run_until_idle()


def fired(engine: Engine) -> list[tuple[str, int]]:
    return [
        (f.timer.message_id, f.timer.deliver_at_ms) for f in engine.fetch_fired("jobs", 0, 1000)
    ]


def kinds(engine: Engine, message_id: str) -> list[tuple[K, int]]:
    return [(e.kind, e.at_ms) for e in engine.get(message_id, include_trace=True).trace]


# == a cancelled id used again =========================================================
def test_a_cancelled_series_id_is_sent_again_with_replace_and_keeps_its_numbering(world):
    clock, make = world
    engine = make()
    first = engine.send(series("nightly"))
    run(clock, engine, 2 * MINUTE_MS)
    assert [i for i, _ in fired(engine)] == ["nightly#1", "nightly#2"]
    assert engine.cancel("nightly") is State.CANCELLED

    # REJECT is unchanged: a different send under the id is refused, a retry answered
    with pytest.raises(AlreadyExists):
        engine.send(series("nightly", body=b"v2"))
    retry = engine.send(series("nightly"))
    assert retry.existed and retry.existing_state is State.CANCELLED

    clock.advance(10 * SECOND_MS)
    again = engine.send(series("nightly", body=b"v2", if_exists=REPLACE))
    assert again.message_id == "nightly" and not again.existed
    assert again.deliver_at_ms == clock.now_ms() + MINUTE_MS != first.deliver_at_ms
    timer = engine.get("nightly")
    assert (timer.state, timer.body, timer.next_occurrence) == (State.SCHEDULED, b"v2", 3)
    run(clock, engine, MINUTE_MS)
    # numbered on from the cancelled version: no new occurrence takes a kept one's id
    assert fired(engine)[2] == ("nightly#3", again.deliver_at_ms)
    assert engine.get("nightly#3").body == b"v2"
    assert engine.get("nightly#1").body == b"tick"


def test_a_cancelled_one_shot_is_replaced_but_fired_and_acked_ones_are_not(world):
    clock, make = world
    engine = make()
    engine.send(one_shot("order-7", b"v1", 10 * MINUTE_MS))
    engine.cancel("order-7")
    again = engine.send(one_shot("order-7", b"v2", 5 * SECOND_MS, REPLACE))
    assert engine.get("order-7").state is State.SCHEDULED
    run(clock, engine, 5 * SECOND_MS)
    assert fired(engine) == [("order-7", again.deliver_at_ms)]
    assert engine.get("order-7").body == b"v2"

    with pytest.raises(FailedPrecondition, match="already FIRED; only a SCHEDULED or CANCELLED"):
        engine.send(one_shot("order-7", b"v3", SECOND_MS, REPLACE))
    engine.ack("jobs", ["order-7"])
    with pytest.raises(FailedPrecondition, match="already ACKED"):
        engine.send(one_shot("order-7", b"v3", SECOND_MS, REPLACE))
    assert engine.unacked() == 0


def test_an_id_cancelled_again_after_a_replace_is_kept_for_its_whole_retention(world):
    """The first cancel's retention entry comes due while the id is cancelled for the
    second time: the record is kept until the second cancel's retention ends."""
    clock, make = world
    engine = make(retention_ms=HOUR_MS)
    engine.send(one_shot("order-8", b"v1", 2 * HOUR_MS))
    engine.cancel("order-8")
    run(clock, engine, 20 * MINUTE_MS, step_ms=MINUTE_MS)
    engine.send(one_shot("order-8", b"v2", 2 * HOUR_MS, REPLACE))
    run(clock, engine, 20 * MINUTE_MS, step_ms=MINUTE_MS)
    second_cancel_ms = clock.now_ms()
    engine.cancel("order-8")
    run(clock, engine, HOUR_MS - 20 * MINUTE_MS - 10 * SECOND_MS, step_ms=MINUTE_MS)
    # the first cancel's retention has ended: the second's has not
    assert clock.now_ms() > T0 + HOUR_MS
    assert engine.get("order-8").cancelled_at_ms == second_cancel_ms
    run(clock, engine, 20 * MINUTE_MS + 20 * SECOND_MS, step_ms=MINUTE_MS)
    assert clock.now_ms() > second_cancel_ms + HOUR_MS
    with pytest.raises(NotFound):
        engine.get("order-8")


# == the first send time through REPLACE ===============================================
def test_the_trace_keeps_the_first_send_time_through_replaces(world):
    clock, make = world
    engine = make()
    sent_ms = clock.now_ms()
    engine.send(one_shot("debounce", b"v1", 2 * HOUR_MS))  # into the hour wheel
    run(clock, engine, 95 * MINUTE_MS, step_ms=MINUTE_MS)  # its hour slot cascades
    first_replace_ms = clock.now_ms()
    engine.send(one_shot("debounce", b"v2", 30 * SECOND_MS, REPLACE))  # into the second wheel
    clock.advance(5 * SECOND_MS)
    second_replace_ms = clock.now_ms()
    last = engine.send(one_shot("debounce", b"v3", 10 * SECOND_MS, REPLACE))
    run(clock, engine, 10 * SECOND_MS)

    timer = engine.get("debounce", include_trace=True)
    events = [(e.kind, e.at_ms) for e in timer.trace]
    assert events[0] == (K.SENT, sent_ms)
    assert timer.trace[0].wheel == "hour"
    assert (K.CASCADED, first_replace_ms) not in events
    assert events[-5:] == [
        (K.REPLACED, first_replace_ms), (K.SENT, first_replace_ms),
        (K.REPLACED, second_replace_ms), (K.SENT, second_replace_ms),
        (K.FIRED, last.deliver_at_ms),
    ]  # fmt: skip
    assert [e.kind for e in timer.trace].count(K.CASCADED) >= 1  # the first version's
    assert timer.trace[-1].wheel == "second"  # where the last version was, not the first's
    assert timer.created_at_ms == second_replace_ms  # the record is the last version's


def test_the_trace_of_a_cancelled_id_sent_again_shows_both_lives(world):
    clock, make = world
    engine = make()
    engine.send(one_shot("again", b"v1", 10 * MINUTE_MS))
    clock.advance(SECOND_MS)
    engine.cancel("again")
    cancelled_ms = clock.now_ms()
    clock.advance(SECOND_MS)
    engine.send(one_shot("again", b"v2", 10 * MINUTE_MS, REPLACE))
    assert kinds(engine, "again") == [
        (K.SENT, T0), (K.CANCELLED, cancelled_ms), (K.REPLACED, cancelled_ms + SECOND_MS),
        (K.SENT, cancelled_ms + SECOND_MS),
    ]  # fmt: skip


# == bounded catch-up ==================================================================
def test_fire_each_with_max_catch_up_fires_the_oldest_missed_then_goes_on_after_now(world):
    clock, make = world
    engine = make()
    start = engine.send(series("s", missed=MissedPolicy.FIRE_EACH, max_catch_up=3))
    clock.advance(10 * MINUTE_MS + 30 * SECOND_MS)  # down: ten occurrences missed
    engine.run_until_idle()
    times = [start.deliver_at_ms + n * MINUTE_MS for n in range(3)]
    assert fired(engine) == [("s#1", times[0]), ("s#2", times[1]), ("s#3", times[2])]
    next_ms = engine.get("s").deliver_at_ms
    assert next_ms == start.deliver_at_ms + 10 * MINUTE_MS  # the first time after now
    assert next_ms > clock.now_ms()
    run(clock, engine, MINUTE_MS)
    assert fired(engine)[3] == ("s#4", next_ms)  # numbering goes on: skipped ones take none
    assert engine.unacked() == 4


def test_a_catch_up_window_skips_what_is_older_under_either_policy(world):
    clock, make = world
    engine = make()
    each = engine.send(
        series("each", missed=MissedPolicy.FIRE_EACH, catch_up_window_ms=140 * SECOND_MS)
    )
    once = engine.send(series("once", catch_up_window_ms=140 * SECOND_MS))
    clock.advance(10 * MINUTE_MS + 30 * SECOND_MS)  # due: +1 .. +10 min; now +10.5 min
    engine.run_until_idle()
    got = fired(engine)
    # inside the window [now - 140 s, now]: the occurrences at +9 and +10 minutes
    assert [t for i, t in got if i.startswith("each")] == [
        each.deliver_at_ms + 8 * MINUTE_MS,
        each.deliver_at_ms + 9 * MINUTE_MS,
    ]
    assert [(i, t) for i, t in got if i.startswith("once")] == [
        ("once#1", once.deliver_at_ms + 8 * MINUTE_MS)
    ]


def test_nothing_fires_when_every_missed_occurrence_is_outside_the_window(world, tmp_path):
    clock, make = world
    engine = make()
    start = engine.send(series("hourly", every_ms=HOUR_MS, delay_ms=HOUR_MS,
                               catch_up_window_ms=10 * MINUTE_MS))  # fmt: skip
    engine.close()  # down for three and a half hours
    clock.advance(3 * HOUR_MS + 30 * MINUTE_MS)
    engine = make()
    engine.run_until_idle()
    assert fired(engine) == []
    assert engine.unacked() == 0  # the fire sequence the skip took is handed back
    timer = engine.get("hourly")
    assert (timer.deliver_at_ms, timer.next_occurrence) == (start.deliver_at_ms + 3 * HOUR_MS, 1)
    run(clock, engine, 30 * MINUTE_MS, step_ms=MINUTE_MS)
    assert fired(engine) == [("hourly#1", start.deliver_at_ms + 3 * HOUR_MS)]


@pytest.mark.parametrize(
    ("repeat", "field"),
    [
        ({"catch_up_window_ms": 999}, "catch_up_window_ms"),
        ({"catch_up_window_ms": -1}, "catch_up_window_ms"),
        ({"max_catch_up": 2}, "max_catch_up"),  # FIRE_ONCE fires one
        ({"max_catch_up": 1_001, "missed": MissedPolicy.FIRE_EACH}, "max_catch_up"),
        ({"max_catch_up": -1, "missed": MissedPolicy.FIRE_EACH}, "max_catch_up"),
    ],
)
def test_catch_up_bounds_out_of_range_are_refused_naming_the_field(world, repeat, field):
    _, make = world
    engine = make()
    with pytest.raises(InvalidArgument, match=f"repeat.{field}="):
        engine.send(series("bad", **repeat))
    with pytest.raises(NotFound):
        engine.get("bad")


# == pause and resume ==================================================================
def test_a_paused_series_fires_nothing_and_resumes_at_its_next_time_without_catch_up(world):
    clock, make = world
    engine = make()
    start = engine.send(series("p", missed=MissedPolicy.FIRE_EACH))
    run(clock, engine, MINUTE_MS)
    assert [i for i, _ in fired(engine)] == ["p#1"]
    paused_at_ms = clock.now_ms()
    assert engine.pause_series("p", True) == (True, start.deliver_at_ms + MINUTE_MS)
    assert engine.pause_series("p", True).changed is False  # paused already: no change
    run(clock, engine, 5 * MINUTE_MS + 30 * SECOND_MS)
    assert [i for i, _ in fired(engine)] == ["p#1"]
    timer = engine.get("p")
    assert timer.paused and timer.state is State.SCHEDULED and timer.next_occurrence == 2
    assert timer.deliver_at_ms == start.deliver_at_ms + 6 * MINUTE_MS  # moves on meanwhile
    assert engine.unacked() == 1

    resumed_at_ms = clock.now_ms()
    assert engine.pause_series("p", False) == (True, start.deliver_at_ms + 6 * MINUTE_MS)
    assert not engine.get("p").paused
    run(clock, engine, MINUTE_MS)
    # no catch-up of the paused minutes (FIRE_EACH or not): the next time, numbered on
    assert fired(engine) == [
        ("p#1", start.deliver_at_ms),
        ("p#2", start.deliver_at_ms + 6 * MINUTE_MS),
    ]
    events = kinds(engine, "p")
    assert (K.PAUSED, paused_at_ms) in events and (K.RESUMED, resumed_at_ms) in events


def test_a_pause_survives_a_restart_a_reschedule_and_a_replace_but_not_a_cancel(world):
    clock, make = world
    engine = make()
    engine.send(series("q"))
    engine.pause_series("q", True)
    engine.reschedule("q", When(WhenKind.DELAY, 30 * SECOND_MS))
    assert engine.get("q").paused
    engine.close()
    engine = make()
    run(clock, engine, 3 * MINUTE_MS)
    assert fired(engine) == []
    engine.send(series("q", body=b"v2", if_exists=REPLACE))
    assert engine.get("q").paused  # a new definition does not resume it
    run(clock, engine, 2 * MINUTE_MS)
    assert fired(engine) == []
    engine.cancel("q")
    engine.send(series("q", body=b"v3", if_exists=REPLACE))
    assert not engine.get("q").paused  # a cancelled series starts anew
    run(clock, engine, MINUTE_MS)
    assert [i for i, _ in fired(engine)] == ["q#1"]


def test_pausing_what_is_not_a_scheduled_series_is_refused(world):
    _, make = world
    engine = make()
    engine.send(one_shot("plain", b"x", MINUTE_MS))
    with pytest.raises(FailedPrecondition, match="not a recurring series"):
        engine.pause_series("plain", True)
    engine.send(series("gone"))
    engine.cancel("gone")
    with pytest.raises(FailedPrecondition, match="already CANCELLED"):
        engine.pause_series("gone", False)
    with pytest.raises(NotFound):
        engine.pause_series("nothing", True)
    with pytest.raises(InvalidArgument, match="series_id="):
        engine.pause_series("", True)


def test_a_paused_series_ends_at_its_end_time(world):
    clock, make = world
    engine = make()
    start = engine.send(series("e", end_at_ms=T0 + 5 * MINUTE_MS))
    assert start.deliver_at_ms == T0 + MINUTE_MS
    engine.pause_series("e", True)
    run(clock, engine, 6 * MINUTE_MS)
    timer = engine.get("e")
    assert timer.state is State.ACKED and fired(engine) == []
