"""The key codec: round trips, and byte order equal to time order."""

from hypothesis import given
from hypothesis import strategies as st

from store import keys
from wheels.scheduler import TimerKey

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
