"""Per-batch entries of the batch-level layout (decision 0014): wheel, `ready`, `acked`,
`segstate`, `overrides`, `ids` and the fire cursor round trip, and refuse what they
cannot hold."""

from __future__ import annotations

from bisect import bisect_right

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store import batch_entries as be

times = st.integers(0, 2**63 - 1)
indexes = st.integers(0, 2**16 - 1)
seqs = st.integers(0, 2**40 - 1)


@given(st.lists(st.tuples(times, indexes), min_size=1, max_size=60))
def test_a_wheel_entry_round_trips(pairs):
    pairs.sort()
    decoded = be.decode_wheel_entry(be.wheel_entry([p[0] for p in pairs], [p[1] for p in pairs]))
    assert list(zip(*decoded, strict=True)) == pairs


@given(st.lists(times, min_size=1, max_size=60), st.data())
def test_a_run_of_a_sorted_column_is_the_wheel_entry_of_its_pairs(deliver, data):
    deliver.sort()
    first = data.draw(st.integers(0, len(deliver) - 1))
    end = data.draw(st.integers(first + 1, len(deliver)))
    run = be.wheel_entry_run(be.column_bytes("q", deliver), first, end)
    assert run == be.wheel_entry(deliver[first:end], range(first, end))


@pytest.mark.parametrize(("first", "end"), [(2, 2), (3, 2), (-1, 2), (0, 5)])
def test_a_run_outside_its_column_is_refused(first, end):
    with pytest.raises(ValueError, match="run"):
        be.wheel_entry_run(be.column_bytes("q", [1, 2, 3, 4]), first, end)


@given(st.lists(st.integers(0, 2**48), min_size=1, max_size=200), st.sampled_from([1000, 60_000]))
def test_wheel_entries_hold_each_message_once_in_its_slot_sorted(deliver, slot_ms):
    entries = be.wheel_entries(deliver, slot_ms)
    seen = []
    for start, value in entries.items():
        times_, idx = be.decode_wheel_entry(value)
        assert start % slot_ms == 0
        assert all(start <= t < start + slot_ms for t in times_)
        assert list(zip(times_, idx, strict=True)) == sorted(zip(times_, idx, strict=True))
        assert all(deliver[i] == t for t, i in zip(times_, idx, strict=True))
        seen += idx
    assert sorted(seen) == list(range(len(deliver)))


@given(st.lists(st.integers(0, 10_000), min_size=1, max_size=100), st.integers(0, 10_000))
def test_bisect_on_a_wheel_entry_finds_what_is_due(deliver, now_ms):
    (value,) = be.wheel_entries(sorted(deliver), 1 << 40).values()
    times_, idx = be.decode_wheel_entry(value)
    due = bisect_right(times_, now_ms)
    assert sorted(idx[:due]) == [i for i, t in enumerate(sorted(deliver)) if t <= now_ms]


def test_a_wheel_entry_refuses_unequal_or_empty_columns():
    with pytest.raises(ValueError, match="2 deliver times and 1 indexes"):
        be.wheel_entry([1, 2], [0])
    with pytest.raises(ValueError, match="0 deliver times"):
        be.wheel_entry([], [])
    with pytest.raises(ValueError, match="11 bytes is not n"):
        be.decode_wheel_entry(bytes(11))


@given(
    st.integers(-(2**63), 2**63 - 1),
    st.lists(st.tuples(st.integers(0, 2**64 - 1), indexes), max_size=80),
)
def test_a_references_entry_round_trips(time_ms, refs):
    value = be.refs_entry(time_ms, [r[0] for r in refs], [r[1] for r in refs])
    decoded = be.decode_refs(value)
    assert decoded.time_ms == be.refs_time_ms(value) == time_ms
    assert list(zip(decoded.segments, decoded.indexes, strict=True)) == refs


def test_a_references_entry_refuses_what_is_not_one():
    with pytest.raises(ValueError, match="1 segments and 2 indexes"):
        be.refs_entry(0, [1], [1, 2])
    with pytest.raises(ValueError, match="25 bytes does not hold 1"):
        be.decode_refs(be.refs_entry(0, [1], [1]) + bytes(3))
    with pytest.raises(ValueError, match="of 5 bytes does not hold"):
        be.decode_refs(bytes(5))


def test_a_place_or_cursor_of_the_wrong_size_is_refused():
    with pytest.raises(ValueError, match="an `ids` value of 9 bytes, not 10"):
        be.decode_place(bytes(9))
    with pytest.raises(ValueError, match="a fire cursor of 19 bytes, not 18"):
        be.decode_cursor(bytes(19))


@given(st.lists(st.tuples(st.integers(0, 255), times), min_size=1, max_size=100), st.data())
def test_a_segstate_round_trips_and_reads_one_message_in_place(states, data):
    value = be.segstate_entry(bytes(s for s, _ in states), [t for _, t in states])
    got_states, got_times = be.decode_segstate(value)
    assert list(zip(got_states, got_times, strict=True)) == states
    i = data.draw(st.integers(0, len(states) - 1))
    assert be.segstate_of(value, i) == states[i]
    with pytest.raises(IndexError):
        be.segstate_of(value, len(states))


overrides = st.builds(
    be.Override,
    st.none() | times,
    st.none() | times,
    st.none() | st.text(alphabet="abc_.%|-9", min_size=1, max_size=40),
).filter(lambda o: o != be.Override())


@given(overrides)
def test_an_override_round_trips(override):
    assert be.decode_override(be.override_value(override)) == override


def test_an_override_that_changes_nothing_is_refused():
    with pytest.raises(ValueError, match="changes nothing"):
        be.override_value(be.Override())
    with pytest.raises(ValueError, match="an override of 3 bytes is cut short"):
        be.decode_override(be.override_value(be.Override(deliver_ms=5))[:3])
    with pytest.raises(ValueError, match="an override of 10 bytes, 9 expected"):
        be.decode_override(be.override_value(be.Override(deliver_ms=5)) + b"x")


@given(seqs, indexes)
def test_a_place_round_trips(seq, index):
    assert be.decode_place(be.place_value(seq, index)) == (seq, index)


@given(st.tuples(times, seqs, indexes), st.tuples(times, seqs, indexes))
def test_the_fire_cursor_round_trips_and_compares_as_bytes(a, b):
    assert be.decode_cursor(be.cursor_value(*a)) == a
    assert (be.cursor_value(*a) < be.cursor_value(*b)) == (a < b)
