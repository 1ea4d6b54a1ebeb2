"""The key codec: round trips, and byte order equal to time order."""

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store import keys
from timerwheel.wheels.scheduler import TimerKey

times = st.integers(0, 2**63 - 1)
ids = st.text(alphabet="ABCDEFabcdef0123456789_.:@-", min_size=1, max_size=40)


@given(times, ids)
def test_wheel_key_round_trips(t_ms, message_id):
    raw = keys.wheel_key(t_ms, message_id)
    assert keys.decode_timer_key(raw) == TimerKey(t_ms, message_id)
    assert keys.key_time_ms(raw) == t_ms


@given(times, ids, times, ids)
def test_wheel_key_byte_order_is_time_then_id_order(t1, id1, t2, id2):
    assert (keys.wheel_key(t1, id1) < keys.wheel_key(t2, id2)) == ((t1, id1) < (t2, id2))


@given(times, times)
def test_time_bound_orders_like_the_numbers(a, b):
    assert (keys.time_bound(a) < keys.time_bound(b)) == (a < b)


@given(times, ids)
def test_time_bound_is_the_smallest_key_at_that_time(t_ms, message_id):
    assert keys.time_bound(t_ms) < keys.wheel_key(t_ms, message_id) < keys.time_bound(t_ms + 1)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_ready_keys_sort_in_fire_order_within_a_topic(a, b):
    assert (keys.ready_key("orders", a) < keys.ready_key("orders", b)) == (a < b)
    assert keys.ready_seq(keys.ready_key("orders", a)) == a


def test_a_topic_ready_range_excludes_topics_sharing_its_prefix():
    prefix = keys.ready_prefix("ord")
    end = keys.prefix_end(prefix)
    assert prefix <= keys.ready_key("ord", 2**64 - 1) < end
    assert not prefix <= keys.ready_key("orders", 0) < end
    assert not prefix <= keys.ready_key("or", 5) < end


def test_meta_names_are_distinct_per_level():
    names = {keys.meta_horizon("second"), keys.meta_horizon("minute"), keys.meta_pending("second")}
    assert len(names) == 3


@given(st.lists(st.tuples(times, ids), max_size=20))
def test_wheel_keys_of_many_are_each_one_wheel_key(timers):
    raw_ids = [message_id.encode() for _, message_id in timers]
    made = keys.wheel_keys([t_ms for t_ms, _ in timers], raw_ids)
    assert made == [keys.wheel_key(t_ms, message_id) for t_ms, message_id in timers]


@given(st.lists(ids, min_size=1, max_size=20), st.integers(0, 2**63))
def test_trace_keys_number_events_in_order_under_each_message_prefix(message_ids, first_seq):
    raw_ids = [message_id.encode() for message_id in message_ids]
    made = keys.trace_keys(raw_ids, first_seq)
    for n, (message_id, key) in enumerate(zip(raw_ids, made, strict=True)):
        prefix = keys.trace_prefix(message_id)
        assert key.startswith(prefix) and keys.decode_u64(key[len(prefix) :]) == first_seq + n
    for id_a, a, id_b, b in zip(raw_ids, made, raw_ids[1:], made[1:], strict=False):
        if id_a == id_b:
            assert a < b  # one message's events sort in the order they were written


def test_a_minute_counter_key_slices_to_its_topic():
    minute, total = keys.count_keys(b"orders", 90_061_000)
    assert minute[: keys.COUNT_TOPIC_END] == b"orders"
    assert total == keys.count_total_key(b"orders")


topics = st.text(alphabet="ABCabc0123_.%|-", min_size=1, max_size=20)


@given(st.lists(st.tuples(times, ids), max_size=20))
def test_wheel_key_ids_and_times_undo_wheel_keys(timers):
    made = keys.wheel_keys([t_ms for t_ms, _ in timers], [i.encode() for _, i in timers])
    assert keys.wheel_key_ids(made) == [message_id.encode() for _, message_id in timers]
    assert keys.wheel_key_times_ms(made) == [t_ms for t_ms, _ in timers]


@given(times, ids)
def test_wheel_key_at_a_time_cut_from_bytes_is_the_wheel_key(t_ms, message_id):
    at = keys.wheel_key_at(keys.time_bound(t_ms), message_id.encode())
    assert at == keys.wheel_key(t_ms, message_id)


@given(times, st.lists(ids, min_size=1, max_size=20))
def test_an_expiry_entry_sorts_by_its_time_and_gives_back_every_id_it_retires(t_ms, message_ids):
    raw_ids = [message_id.encode() for message_id in message_ids]
    key, value = keys.expiry_entry(t_ms, raw_ids)
    assert key == keys.wheel_key(t_ms, message_ids[0])
    assert keys.time_bound(t_ms) < key < keys.time_bound(t_ms + 1)
    assert keys.expiry_entry_ids(key, value) == raw_ids


@given(times, ids)
def test_one_message_s_expiry_entry_is_its_key_alone_as_a_cancel_writes_it(t_ms, message_id):
    key, value = keys.expiry_entry(t_ms, [message_id.encode()])
    assert (key, value) == (keys.wheel_key(t_ms, message_id), b"")
    assert keys.expiry_entry_ids(key, b"") == [message_id.encode()]


@given(topics, st.lists(st.integers(0, 2**64 - 1), max_size=20))
def test_ready_keys_of_many_are_each_one_ready_key_of_their_topic(topic, seqs):
    made = keys.ready_keys(topic.encode(), seqs)
    assert made == [keys.ready_key(topic, seq) for seq in seqs]
    assert all(keys.ready_key_topic(key) == topic.encode() for key in made)
    assert [keys.ready_seq(key) for key in made] == seqs


@given(st.lists(st.tuples(topics, times), max_size=20))
def test_count_bucket_tally_counts_each_timer_in_its_minute_counter(timers):
    tally = keys.count_bucket_tally([t.encode() for t, _ in timers], [ms for _, ms in timers])
    assert tally == Counter(keys.count_keys(t.encode(), ms)[0] for t, ms in timers)
    assert {key[: keys.COUNT_TOPIC_END] for key in tally} == {t.encode() for t, _ in timers}


@given(topics, times, st.lists(st.integers(0, 2 * keys.COUNT_BUCKET_MS), min_size=1, max_size=20))
def test_count_bucket_tally_of_one_topic_splits_it_at_each_minute(topic, t_ms, offsets_ms):
    times_ms = [t_ms + offset for offset in offsets_ms]
    tally = keys.count_bucket_tally([topic.encode()] * len(times_ms), times_ms)
    assert tally == Counter(keys.count_keys(topic.encode(), ms)[0] for ms in times_ms)


@given(topics, times)
def test_a_total_counter_key_is_told_from_a_minute_key(topic, t_ms):
    minute, total = keys.count_keys(topic.encode(), t_ms)
    assert keys.is_count_total_key(total) and not keys.is_count_total_key(minute)
    assert keys.count_total_topic(total) == topic.encode()
