"""Keys of the batch-level layout, version 2 (planned; decision 0014): round trips, and
byte order equal to the order of the times and seqs they encode, as the wheels' are."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store import batch_keys as bk
from timerwheel.store import keys

times = st.integers(0, 2**63 - 1)
seqs = st.integers(0, 2**40 - 1)
indexes = st.integers(0, 2**16 - 1)


def test_version_2_is_planned_not_live():
    assert keys.SCHEMA_VERSION == 1
    assert bk.PLANNED_SCHEMA_VERSION == 2
    assert len(set(bk.PLANNED_COLUMN_FAMILIES)) == len(bk.PLANNED_COLUMN_FAMILIES)
    assert {bk.CF_SEGMENTS, bk.CF_ACKED, bk.CF_SEGSTATE, bk.CF_OVERRIDES, bk.CF_IDS}.isdisjoint(
        keys.ALL_COLUMN_FAMILIES
    )


@given(seqs, seqs)
def test_segment_keys_round_trip_and_sort_as_their_seqs(a, b):
    assert bk.segment_seq(bk.segment_key(a)) == a
    assert (bk.segment_key(a) < bk.segment_key(b)) == (a < b)


@given(times, seqs, times, seqs)
def test_wheel_entry_keys_sort_by_slot_then_segment(t1, s1, t2, s2):
    k1, k2 = bk.wheel_entry_key(t1, s1), bk.wheel_entry_key(t2, s2)
    assert bk.decode_wheel_entry_key(k1) == (t1, s1)
    assert (k1 < k2) == ((t1, s1) < (t2, s2))


@given(times, seqs)
def test_a_slot_bound_is_the_smallest_key_at_that_time(t_ms, seq):
    key = bk.wheel_entry_key(t_ms, seq)
    assert bk.slot_bound(t_ms) <= key < bk.slot_bound(t_ms + 1)
    assert bk.slot_bound(t_ms) <= bk.expiry_key(t_ms, seq) < bk.slot_bound(t_ms + 1)


@given(times, seqs, times, seqs)
def test_expiry_keys_sort_by_time_then_segment(t1, s1, t2, s2):
    k1, k2 = bk.expiry_key(t1, s1), bk.expiry_key(t2, s2)
    assert bk.decode_expiry_key(k1) == (t1, s1)
    assert (k1 < k2) == ((t1, s1) < (t2, s2))


@given(seqs, seqs)
def test_acked_keys_sort_as_the_ack_calls(a, b):
    assert (bk.acked_key(a) < bk.acked_key(b)) == (a < b)


@given(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1))
def test_fire_chunk_keys_sort_in_fire_order_within_a_topic(a, b):
    assert (bk.chunk_key("orders", a) < bk.chunk_key("orders", b)) == (a < b)
    assert bk.chunk_seq(bk.chunk_key("orders", a)) == a


@given(seqs, indexes, seqs, indexes)
def test_place_keys_sort_by_segment_then_index_and_stay_in_their_segments_range(s1, i1, s2, i2):
    k1, k2 = bk.place_key(s1, i1), bk.place_key(s2, i2)
    assert bk.decode_place_key(k1) == (s1, i1)
    assert (k1 < k2) == ((s1, i1) < (s2, i2))
    first, end = bk.segment_range(s1)
    assert (first <= k2 < end) == (s2 == s1)


@given(seqs, indexes, times, seqs, indexes, times)
def test_trace_keys_sort_by_message_then_event_within_a_segments_range(s1, i1, q1, s2, i2, q2):
    k1, k2 = bk.trace_key(s1, i1, q1), bk.trace_key(s2, i2, q2)
    assert bk.decode_trace_key(k1) == (s1, i1, q1)
    assert (k1 < k2) == ((s1, i1, q1) < (s2, i2, q2))
    first, end = bk.segment_range(s1)
    assert (first <= k2 < end) == (s2 == s1)


def test_keys_refuse_what_they_cannot_name():
    with pytest.raises(ValueError, match="segment seq 1099511627776"):
        bk.segment_range(2**40)
    with pytest.raises(ValueError, match="empty client id"):
        bk.ids_key("")
    assert bk.ids_key("tenant-a/order-7") == b"tenant-a/order-7"
