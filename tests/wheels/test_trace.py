"""timerwheel.wheels.trace.assemble: a timer's record and its stored events as one ordered trace."""

from __future__ import annotations

from timerwheel.wheels.trace import RecordFacts, TraceEvent, TraceKind, assemble, attempts_made

K = TraceKind


def kinds(trace) -> list[tuple[TraceKind, int]]:
    return [(event.kind, event.at_ms) for event in trace]


def test_a_cascaded_fired_redelivered_acked_timer_in_order():
    stored = [
        TraceEvent(K.CASCADED, 500, wheel="minute", from_wheel="hour"),
        TraceEvent(K.CASCADED, 900, wheel="second", from_wheel="minute"),
        TraceEvent(K.DELIVERED, 1_000, attempt=1, subscriber="a"),  # same ms as the fire
        TraceEvent(K.NACKED, 1_200, attempt=1, detail="db down"),
        TraceEvent(K.DELIVERED, 1_200, attempt=2, subscriber="b"),
    ]
    facts = RecordFacts(100, "hour", fired_at_ms=1_000, acked_at_ms=1_300)
    trace = assemble(facts, stored)
    assert kinds(trace) == [
        (K.SENT, 100), (K.CASCADED, 500), (K.CASCADED, 900), (K.FIRED, 1_000),
        (K.DELIVERED, 1_000), (K.NACKED, 1_200), (K.DELIVERED, 1_200), (K.ACKED, 1_300),
    ]  # fmt: skip
    assert trace[0].wheel == "hour"
    assert trace[3].wheel == "second"  # where the last cascade put it
    assert attempts_made(trace) == 2


def test_a_cascade_in_the_millisecond_of_the_fire_comes_before_it():
    stored = [TraceEvent(K.CASCADED, 700, wheel="second", from_wheel="minute")]
    trace = assemble(RecordFacts(0, "minute", fired_at_ms=700), stored)
    assert kinds(trace) == [(K.SENT, 0), (K.CASCADED, 700), (K.FIRED, 700)]
    assert trace[-1].wheel == "second"


def test_a_stored_fire_out_of_an_upper_wheel_is_not_repeated():
    stored = [TraceEvent(K.FIRED, 800, wheel="hour")]
    trace = assemble(RecordFacts(0, "hour", fired_at_ms=800), stored)
    assert kinds(trace) == [(K.SENT, 0), (K.FIRED, 800)]
    assert trace[1].wheel == "hour"


def test_a_dead_letter_fires_twice_and_counts_attempts_again():
    stored = [
        TraceEvent(K.DELIVERED, 200, attempt=1, subscriber="a"),
        TraceEvent(K.NACKED, 250, attempt=1, detail="bad"),
        TraceEvent(K.FIRED, 150, wheel="second"),  # written at the move, kept in time order
        TraceEvent(K.DEAD_LETTERED, 250, detail="jobs.dlq"),
        TraceEvent(K.DELIVERED, 300, attempt=1, subscriber="dlq-reader"),
    ]
    trace = assemble(RecordFacts(100, "second", fired_at_ms=250), stored)
    assert kinds(trace) == [
        (K.SENT, 100), (K.FIRED, 150), (K.DELIVERED, 200), (K.NACKED, 250),
        (K.DEAD_LETTERED, 250), (K.FIRED, 250), (K.DELIVERED, 300),
    ]  # fmt: skip
    assert trace[5].wheel == ""  # into the DLQ topic, not out of a wheel
    assert attempts_made(trace) == 1


def test_a_failed_attempt_counts_when_its_delivery_was_not_traced():
    # trace_first_deliveries off: attempt 1 is known by its NACKED event alone
    stored = [
        TraceEvent(K.NACKED, 250, attempt=1, detail="ack timeout"),
        TraceEvent(K.DELIVERED, 300, attempt=2, subscriber="a"),
    ]
    assert attempts_made(assemble(RecordFacts(100, "second", fired_at_ms=200), stored)) == 2
    assert attempts_made(stored[:1]) == 1


def test_a_timer_due_at_once_and_a_cancelled_one():
    fired_at_once = assemble(RecordFacts(50, "", fired_at_ms=50), [])
    assert kinds(fired_at_once) == [(K.SENT, 50), (K.FIRED, 50)]
    assert [e.wheel for e in fired_at_once] == ["", ""]
    cancelled = assemble(RecordFacts(50, "minute", cancelled_at_ms=90), [])
    assert kinds(cancelled) == [(K.SENT, 50), (K.CANCELLED, 90)]
    assert attempts_made(cancelled) == 0


def test_a_replacement_keeps_the_old_versions_events_before_the_new_send():
    stored = [
        TraceEvent(K.CASCADED, 400, wheel="minute", from_wheel="hour"),
        TraceEvent(K.REPLACED, 600, deliver_at_ms=9_000),
        TraceEvent(K.RESCHEDULED, 700, wheel="second", deliver_at_ms=800),
    ]
    trace = assemble(RecordFacts(600, "minute", fired_at_ms=800), stored)
    assert kinds(trace) == [
        (K.CASCADED, 400), (K.REPLACED, 600), (K.SENT, 600), (K.RESCHEDULED, 700),
        (K.FIRED, 800),
    ]  # fmt: skip
    assert trace[-1].wheel == "second"  # placed there by the reschedule


def test_a_first_delivery_the_record_holds_is_in_place_among_the_stored_events():
    facts = RecordFacts(
        created_at_ms=100, placed_in="second", fired_at_ms=1_000, acked_at_ms=1_300,
        first_delivered_at_ms=1_000, first_delivered_to="a",
    )  # fmt: skip
    stored = [TraceEvent(K.CASCADED, 900, wheel="second", from_wheel="minute")]
    trace = assemble(facts, stored)
    assert kinds(trace) == [
        (K.SENT, 100), (K.CASCADED, 900), (K.FIRED, 1_000), (K.DELIVERED, 1_000),
        (K.ACKED, 1_300),
    ]  # fmt: skip
    assert (trace[3].attempt, trace[3].subscriber) == (1, "a")
    assert attempts_made(trace) == 1


def test_replacements_keep_every_versions_send_and_the_fire_names_the_last_ones_wheel():
    # v1 sent at 100 into the hour wheel, cascaded; replaced at 600 (v2 into the second
    # wheel) and at 700 (v3, into the second wheel); the record is v3's
    stored = [
        TraceEvent(K.CASCADED, 400, wheel="minute", from_wheel="hour"),
        TraceEvent(K.SENT, 100, wheel="hour"),
        TraceEvent(K.REPLACED, 600, wheel="second", deliver_at_ms=900),
        TraceEvent(K.SENT, 600, wheel="second"),
        TraceEvent(K.REPLACED, 700, wheel="second", deliver_at_ms=800),
    ]
    trace = assemble(RecordFacts(700, "second", fired_at_ms=800), stored)
    assert kinds(trace) == [
        (K.SENT, 100), (K.CASCADED, 400), (K.REPLACED, 600), (K.SENT, 600),
        (K.REPLACED, 700), (K.SENT, 700), (K.FIRED, 800),
    ]  # fmt: skip
    assert trace[-1].wheel == "second"  # not the first version's minute wheel


def test_a_cancelled_version_sent_again_in_the_same_millisecond_reads_in_order():
    stored = [
        TraceEvent(K.SENT, 100, wheel="minute"),
        TraceEvent(K.CANCELLED, 300),
        TraceEvent(K.REPLACED, 300, wheel="minute", deliver_at_ms=9_000),
    ]
    trace = assemble(RecordFacts(300, "minute"), stored)
    assert kinds(trace) == [(K.SENT, 100), (K.CANCELLED, 300), (K.REPLACED, 300), (K.SENT, 300)]
