"""The messages record codec."""

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.common import State
from timerwheel.store import keys, records
from timerwheel.wheels.domain import SendSpec, Timer, When, WhenKind

timers = st.builds(
    Timer,
    message_id=st.text(alphabet="ABCDEF0123456789", min_size=1, max_size=32),
    topic=st.text(alphabet="abc_.-", min_size=1, max_size=127),
    body=st.binary(max_size=2000),
    properties=st.dictionaries(st.text(min_size=1, max_size=30), st.text(max_size=100), max_size=5),
    deliver_at_ms=st.integers(0, 2**62),
    created_at_ms=st.integers(0, 2**62),
    state=st.sampled_from(list(State)),
    when=st.builds(When, st.sampled_from(list(WhenKind)), st.integers(-(2**62), 2**62)),
    fired_at_ms=st.integers(0, 2**62),
    acked_at_ms=st.integers(0, 2**62),
    cancelled_at_ms=st.integers(0, 2**62),
    ready_seq=st.integers(0, 2**62),
)


@given(st.lists(st.one_of(st.none(), st.tuples(timers, st.booleans(), st.booleans())), max_size=6))
def test_all_plain_scheduled_is_each_record_there_scheduled_and_not_a_series(many):
    raws = [
        None if item is None
        else records.with_extras_flag(records.encode_timer(item[0]), series=item[2]) if item[1]
        else records.encode_timer(item[0])
        for item in many
    ]  # fmt: skip
    plain = [r is not None and records.is_scheduled(r) and not records.is_series(r) for r in raws]
    assert records.all_plain_scheduled(raws) == all(plain)


@given(st.lists(st.one_of(st.none(), timers), max_size=6), st.sampled_from(["abc", "a", "abc_"]))
def test_all_fired_in_is_each_record_there_fired_and_of_the_topic(many, topic):
    raws = [None if t is None else records.encode_timer(t) for t in many]
    block = records.topic_block(topic)
    each = [
        r is not None and records.is_fired(r) and records.record_topic(r) == topic for r in raws
    ]
    assert [records.fired_in(r, block) for r in raws] == each
    assert records.all_fired_in(raws, block) == all(each)
    fired = [r for r in raws if r is not None]
    assert records.ready_seqs(fired) == [records.record_ready_seq(r) for r in fired]


def test_a_chunk_with_extras_is_plain_and_one_series_is_not():
    scheduled = records.encode_timer(
        Timer("x", "t", b"", {}, 1, 1, State.SCHEDULED, When(WhenKind.DELAY, 1))
    )
    with_extras = records.with_extras_flag(scheduled)
    assert records.all_plain_scheduled([scheduled, with_extras])
    assert not records.all_plain_scheduled([scheduled, records.with_extras_flag(scheduled, True)])
    assert not records.all_plain_scheduled([scheduled, None])


@given(timers)
def test_record_round_trips(timer):
    raw = records.encode_timer(timer)
    assert records.decode_timer(timer.message_id, raw) == timer
    assert records.record_state(raw) is timer.state
    assert records.record_deliver_at_ms(raw) == timer.deliver_at_ms
    assert records.record_topic(raw) == timer.topic
    assert records.record_ready_seq(raw) == timer.ready_seq
    # The export cuts the wheel key's time out of the record without decoding it.
    assert raw[records.DELIVER_AT_TIME_BOUND] == keys.time_bound(timer.deliver_at_ms)


@given(timers)
def test_delivery_parts_are_the_timer_fields_a_delivery_carries_with_the_topic_as_stored(timer):
    assert records.delivery_parts(records.encode_timer(timer)) == (
        timer.topic.encode(), timer.body, dict(timer.properties),
        timer.deliver_at_ms, timer.fired_at_ms,
    )  # fmt: skip


@given(timers, st.integers(0, 2**62))
def test_a_fired_record_tells_the_hub_its_body_size_and_times_without_a_decode(timer, seq):
    raw = records.encode_timer(timer)
    fired = records.FiredRecord(seq, timer.message_id, raw)
    assert (fired.seq, fired.message_id, fired.record) == (seq, timer.message_id, raw)
    assert records.record_body_bytes(raw) == len(timer.body)  # with or without properties
    assert records.record_fired_at_ms(raw) == timer.fired_at_ms
    assert records.record_deliver_at_ms(raw) == timer.deliver_at_ms


@given(st.lists(timers, max_size=20), st.integers(0, 2**62))
def test_fired_records_are_the_rows_with_their_ids_decoded(many, first_seq):
    rows = [
        (first_seq + i, t.message_id.encode(), records.encode_timer(t)) for i, t in enumerate(many)
    ]
    made = records.fired_records(rows)
    assert made == [records.FiredRecord(seq, i.decode(), raw) for seq, i, raw in rows]
    assert all(type(fired) is records.FiredRecord for fired in made)
    assert [fired.message_id for fired in made] == [t.message_id for t in many]


@given(st.lists(timers, max_size=20), st.integers(0, 2**62))
def test_the_fire_lateness_of_one_commits_fires_is_each_records_own(many, fired_at_ms):
    many = [replace(timer, fired_at_ms=fired_at_ms) for timer in many]  # one commit's
    raws = [records.encode_timer(timer) for timer in many]
    lateness = [t.fired_at_ms - t.deliver_at_ms for t in many]
    assert list(records.fire_lateness_ms(raws)) == lateness


@given(timers, st.integers(1, 2**62), st.integers(1, 2**62))
def test_transition_rewrites_only_state_and_given_timestamps(timer, fired_at_ms, seq):
    raw = records.encode_timer(timer)
    fired = records.decode_timer(
        timer.message_id,
        records.with_transition(raw, State.FIRED, fired_at_ms=fired_at_ms, ready_seq=seq),
    )
    assert fired.state is State.FIRED
    assert (fired.fired_at_ms, fired.ready_seq) == (fired_at_ms, seq)
    assert (fired.body, fired.topic, fired.properties) == (
        timer.body,
        timer.topic,
        timer.properties,
    )
    assert (fired.acked_at_ms, fired.cancelled_at_ms) == (timer.acked_at_ms, timer.cancelled_at_ms)


@given(timers, st.integers(1, 2**62))
def test_ack_patch_sets_state_and_time_only(timer, acked_at_ms):
    raw = records.encode_timer(timer)
    acked = records.decode_timer(timer.message_id, records.as_acked(raw, acked_at_ms))
    assert acked.state is State.ACKED and acked.acked_at_ms == acked_at_ms
    assert records.is_fired(records.encode_timer(replace(timer, state=State.FIRED)))
    assert (acked.fired_at_ms, acked.ready_seq, acked.body) == (
        timer.fired_at_ms,
        timer.ready_seq,
        timer.body,
    )


@given(timers, st.integers(1, 2**62), st.integers(0, 2**62), st.text(max_size=80))
def test_an_acked_record_with_its_first_delivery_reads_as_without_it(
    timer, acked_at_ms, delivered_at_ms, subscriber
):
    """Version 2: the trailer is seen only by `first_delivery` and the trace's facts;
    every reader of a body stops where it starts, whatever the body holds."""
    raw = records.as_acked(records.encode_timer(timer), acked_at_ms)
    trailer = records.first_delivery_trailer(delivered_at_ms, subscriber)
    held = records.as_acked(records.encode_timer(timer), acked_at_ms, trailer)
    assert held[0] == records.RECORD_WITH_DELIVERY and raw[0] == records.RECORD_VERSION
    assert records.decode_timer(timer.message_id, held) == records.decode_timer(
        timer.message_id, raw
    )
    assert records.delivery_parts(held) == records.delivery_parts(raw)
    assert records.record_body_bytes(held) == len(timer.body)
    assert records.record_summary(held) == records.record_summary(raw)
    assert records.first_delivery(raw) is None
    assert records.first_delivery(held) == (delivered_at_ms, subscriber)
    facts = records.trace_facts(held)
    assert (facts.first_delivered_at_ms, facts.first_delivered_to) == (delivered_at_ms, subscriber)
    assert facts.acked_at_ms == acked_at_ms
    # A record rewritten later (a state change) keeps it; acked again, it is not doubled.
    assert records.first_delivery(records.with_transition(held, State.CANCELLED)) == (
        delivered_at_ms, subscriber,
    )  # fmt: skip
    assert records.as_acked(held, acked_at_ms, trailer) == held


@given(timers)
def test_new_records_are_the_scheduled_timer_encoded(timer):
    """The send path packs only the fields a new timer sets; the rest must read as zero."""
    new = replace(
        timer, state=State.SCHEDULED, fired_at_ms=0, acked_at_ms=0, cancelled_at_ms=0,
        ready_seq=0,
    )  # fmt: skip
    spec = SendSpec(new.topic, new.body, new.when, new.properties)
    [raw] = records.encode_new_many([spec], [new.deliver_at_ms], new.created_at_ms)
    assert raw == records.encode_timer(new)
    assert records.decode_timer(new.message_id, raw) == new


def test_an_unknown_state_byte_is_refused_not_guessed():
    raw = bytearray(records.encode_timer(
        Timer("x", "t", b"", {}, 1, 1, State.SCHEDULED, When(WhenKind.DELAY, 1))
    ))  # fmt: skip
    raw[1] = 9
    with pytest.raises(ValueError, match="9"):
        records.record_state(bytes(raw))
    with pytest.raises(ValueError, match="9"):
        records.decode_timer("x", bytes(raw))


@given(timers, st.sampled_from(["", "second", "minute", "hour"]))
def test_placement_bits_name_the_wheel_and_leave_the_rest(timer, wheel):
    raw = records.with_extras_flag(records.encode_timer(timer), series=True)
    placed = records.with_placement(raw, wheel)
    assert records.record_placement(placed) == wheel
    assert records.decode_timer(timer.message_id, placed) == records.decode_timer(
        timer.message_id, raw
    )
    assert records.has_extras(placed) and records.is_series(placed)
    assert records.trace_facts(placed).placed_in == wheel
    moved = records.with_schedule(placed, When(WhenKind.DELAY, 5), 123)
    assert records.record_placement(moved) == wheel  # a reschedule keeps the first placement
