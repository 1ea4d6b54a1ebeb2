"""Server-made ids of the batch-level layout (decision 0014): round trips, order, and
clear refusals of anything that is not one."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store import segment_ids as sid
from timerwheel.store.segment_ids import (
    ServerId,
    format_id,
    id_places,
    parse_id,
    parse_ids,
    segment_ids,
)

server_ids = st.builds(
    ServerId,
    st.integers(0, sid.MAX_DELIVER_MS),
    st.integers(0, sid.MAX_SEGMENT),
    st.integers(0, sid.MAX_INDEX),
    st.binary(min_size=sid.RANDOM_BYTES, max_size=sid.RANDOM_BYTES),
)


@given(server_ids)
def test_parse_of_format_is_the_same_id(parts):
    text = format_id(*parts)
    assert len(text) == sid.ID_HEX_DIGITS
    assert parse_id(text) == parts
    assert parse_id(text.encode()) == parts
    assert parse_ids([text.encode()]) == [parts]
    segments, indexes = id_places([text.encode()] * 2)
    assert (list(segments), list(indexes)) == ([parts.segment] * 2, [parts.message_index] * 2)


@given(server_ids, server_ids)
def test_ids_sort_as_their_deliver_time_segment_and_index(a, b):
    if a[:3] != b[:3]:
        assert (format_id(*a) < format_id(*b)) == (a[:3] < b[:3])


@given(
    st.lists(st.integers(0, sid.MAX_DELIVER_MS), min_size=1, max_size=50),
    st.integers(0, sid.MAX_SEGMENT),
    st.data(),
)
def test_a_segments_ids_are_format_id_of_each_message(deliver, seq, data):
    n = len(deliver)
    randoms = data.draw(st.binary(min_size=sid.RANDOM_BYTES * n, max_size=sid.RANDOM_BYTES * n))
    made = segment_ids(deliver, seq, randoms)
    assert [m.decode() for m in made] == [
        format_id(ms, seq, i, randoms[sid.RANDOM_BYTES * i : sid.RANDOM_BYTES * (i + 1)])
        for i, ms in enumerate(deliver)
    ]


@given(server_ids, st.data())
def test_a_changed_random_part_is_another_id(parts, data):
    text = format_id(*parts)
    at = data.draw(st.integers(26, sid.ID_HEX_DIGITS - 1))
    other = data.draw(st.sampled_from([c for c in "0123456789abcdef" if c != text[at]]))
    changed = parse_id(text[:at] + other + text[at + 1 :])
    assert changed[:3] == parts[:3]
    assert changed.random != parts.random


GOOD = format_id(1_780_000_040_123, 42, 7, bytes(range(10)))


@pytest.mark.parametrize(
    "bad",
    [
        "",
        GOOD[:-1],
        GOOD + "0",
        GOOD.upper(),
        GOOD[:-1] + "g",
        " " + GOOD[1:],
        "0190f3c2-7b1e-7cc4-9c7e-1b2d3e4f5a6b",  # a version-1 (UUIDv7) id
        "orders/my-id",
        "é" * 23,
    ],
)
def test_a_malformed_id_is_refused_naming_it(bad):
    with pytest.raises(ValueError, match="is not a server-made id") as raised:
        parse_id(bad)
    assert repr(bad)[:40] in str(raised.value)
    with pytest.raises(ValueError, match="is not a server-made id"):
        parse_ids([GOOD.encode(), bad.encode()])
    with pytest.raises(ValueError, match="is not a server-made id") as raised:
        id_places([GOOD.encode(), bad.encode()])
    assert repr(bad.encode())[:40] in str(raised.value)


@pytest.mark.parametrize(
    ("parts", "message"),
    [
        ((1 << 48, 0, 0, bytes(10)), "deliver time 281474976710656"),
        ((-1, 0, 0, bytes(10)), "deliver time -1"),
        ((0, 1 << 40, 0, bytes(10)), "segment 1099511627776"),
        ((0, 0, 1 << 16, bytes(10)), "index 65536"),
        ((0, 0, 0, bytes(9)), "is not 10 bytes"),
    ],
)
def test_parts_that_do_not_fit_are_refused(parts, message):
    with pytest.raises(ValueError, match=message):
        format_id(*parts)


def test_segment_ids_refuse_what_does_not_fit():
    with pytest.raises(ValueError, match="segment 1099511627776"):
        segment_ids([1], 1 << 40, bytes(10))
    with pytest.raises(ValueError, match="1 messages and 9 random bytes"):
        segment_ids([1], 1, bytes(9))
    with pytest.raises(ValueError, match="48 bits"):
        segment_ids([1 << 48], 1, bytes(10))
