"""The segment codec of the batch-level layout (decision 0014): round trips, reads of one
message that agree with the whole decode, refusals, and the size a Get reads."""

from __future__ import annotations

import os

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.store import segments
from timerwheel.store.segment_ids import RANDOM_BYTES, parse_id, segment_ids
from timerwheel.store.segments import Extras, SegmentView, decode_segment, encode_segment
from timerwheel.wheels.domain import When, WhenKind

texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
topic_names = st.text(alphabet="abcXYZ019_.%|-", min_size=1, max_size=20)
extras_st = st.builds(
    Extras,
    flags=st.integers(0, 255),
    when=st.none()
    | st.builds(When, st.sampled_from(list(WhenKind)), st.integers(-(2**63), 2**63 - 1)),
    client_id=st.none() | texts,
    properties=st.dictionaries(texts, texts, max_size=3),
)


@st.composite
def segment_parts(draw, max_messages=40):
    n = draw(st.integers(1, max_messages))
    topics = draw(st.lists(topic_names, min_size=1, max_size=5, unique=True))
    indexes = bytes(draw(st.lists(st.integers(0, len(topics) - 1), min_size=n, max_size=n)))
    deliver = draw(st.lists(st.integers(0, 2**48 - 1), min_size=n, max_size=n))
    bodies = draw(st.lists(st.binary(max_size=64), min_size=n, max_size=n))
    randoms = draw(st.binary(min_size=RANDOM_BYTES * n, max_size=RANDOM_BYTES * n))
    extras = draw(st.dictionaries(st.integers(0, n - 1), extras_st, max_size=4))
    created = draw(st.integers(0, 2**48 - 1))
    kind = draw(st.sampled_from([WhenKind.DELIVER_AT, WhenKind.DELAY]))
    return created, tuple(topics), indexes, deliver, bodies, randoms, extras, kind


@given(segment_parts())
def test_a_segment_round_trips(parts):
    created, topics, indexes, deliver, bodies, randoms, extras, kind = parts
    value = encode_segment(created, topics, indexes, deliver, bodies, randoms, extras, kind)
    decoded = decode_segment(value)
    expected_extras = {i: e._replace(properties=dict(e.properties)) for i, e in extras.items()}
    assert decoded == (created, kind, topics, indexes, deliver, randoms, bodies, expected_extras)


@given(segment_parts(), st.data())
def test_one_message_read_in_place_agrees_with_the_whole_decode(parts, data):
    created, topics, indexes, deliver, bodies, randoms, extras, kind = parts
    view = SegmentView(
        encode_segment(created, topics, indexes, deliver, bodies, randoms, extras, kind)
    )
    i = data.draw(st.integers(0, len(deliver) - 1))
    assert view.n == len(deliver)
    assert view.body(i) == bodies[i]
    assert view.deliver_ms(i) == deliver[i]
    assert view.topic(i) == topics[indexes[i]]
    assert view.random(i) == randoms[RANDOM_BYTES * i : RANDOM_BYTES * (i + 1)]
    assert view.extras(i) == (
        extras[i]._replace(properties=dict(extras[i].properties)) if i in extras else None
    )
    wanted = data.draw(st.lists(st.integers(0, len(deliver) - 1), max_size=10))
    assert view.bodies(wanted) == [bodies[j] for j in wanted]


@given(segment_parts(), st.data())
def test_when_is_derived_from_the_segment_unless_a_message_says_otherwise(parts, data):
    created, topics, indexes, deliver, bodies, randoms, extras, kind = parts
    view = SegmentView(
        encode_segment(created, topics, indexes, deliver, bodies, randoms, extras, kind)
    )
    i = data.draw(st.integers(0, len(deliver) - 1))
    own = extras.get(i)
    if own is not None and own.when is not None:
        assert view.when(i) == own.when
    elif kind == WhenKind.DELAY:
        assert view.when(i) == When(WhenKind.DELAY, deliver[i] - created)
    else:
        assert view.when(i) == When(kind, deliver[i])


@given(segment_parts(), st.integers(0, 2**40 - 1), st.data())
def test_a_segment_owns_its_ids_and_no_forged_one(parts, seq, data):
    created, topics, indexes, deliver, bodies, randoms, extras, kind = parts
    view = SegmentView(
        encode_segment(created, topics, indexes, deliver, bodies, randoms, extras, kind)
    )
    ids = segment_ids(deliver, seq, randoms)
    i = data.draw(st.integers(0, len(ids) - 1))
    parsed = parse_id(ids[i])
    assert (parsed.segment, parsed.message_index, parsed.deliver_ms) == (seq, i, deliver[i])
    assert view.owns(parsed)
    flip = data.draw(st.integers(0, RANDOM_BYTES - 1))
    forged = bytearray(parsed.random)
    forged[flip] ^= 1 << data.draw(st.integers(0, 7))
    assert not view.owns(parsed._replace(random=bytes(forged)))
    assert not view.owns(parsed._replace(message_index=len(ids)))
    assert not view.owns(parsed._replace(deliver_ms=parsed.deliver_ms ^ 1))


def test_body_outside_the_segment_is_an_index_error():
    view = SegmentView(encode_segment(0, ("t",), b"\0", [5], [b"only"], bytes(RANDOM_BYTES)))
    assert view.body(0) == b"only"
    with pytest.raises(IndexError, match="index 1 of a segment of 1"):
        view.body(1)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((0, ("t",), b"", [], [], b""), "1 to 65536 messages, not 0"),
        ((0, (), b"\0", [1], [b""], bytes(10)), "topic table holds 1 to 256, not 0"),
        ((0, ("t",), b"\0", [1], [b"", b""], bytes(10)), "2 bodies"),
        ((0, ("t",), b"\0", [1], [b""], bytes(9)), "9 random bytes"),
        ((0, ("t",), b"\1", [1], [b""], bytes(10)), "topic index 1 outside a table of 1"),
        ((0, ("t",), b"\0", [1], [b""], bytes(10), {3: Extras(1)}), "extras for index 3"),
        ((0, ("t",), b"\0", [1], [b""], bytes(10), None, WhenKind.LEVEL), "not <WhenKind.LEVEL"),
    ],
)
def test_columns_that_make_no_segment_are_refused(args, message):
    with pytest.raises(ValueError, match=message):
        encode_segment(*args)


def test_a_segment_of_another_layout_version_is_refused():
    value = bytearray(encode_segment(0, ("t",), b"\0", [1], [b"x"], bytes(RANDOM_BYTES)))
    value[0] = segments.SEGMENT_VERSION + 1
    with pytest.raises(ValueError, match="segment layout version 2"):
        SegmentView(bytes(value))


def test_a_full_segment_of_100_byte_bodies_is_what_a_get_may_read():
    """Decision 0014 keeps `SEGMENT_MAX` at 1,024 so that a Get reads at most about 150 KB
    with 100-byte bodies; the ids column holds only each id's random part, so it is less."""
    n = segments.SEGMENT_MAX
    value = encode_segment(
        1_780_000_000_000,
        ("orders",),
        bytes(n),
        [1_780_000_040_000 + i for i in range(n)],
        [os.urandom(100) for _ in range(n)],
        os.urandom(RANDOM_BYTES * n),
    )
    per_message = 100 + RANDOM_BYTES + 8 + 1 + 4  # body, id's random part, deliver, topic, end
    assert len(value) == per_message * n + 16 + 2 + len("orders") + 4
    assert 100 * n < len(value) <= 150 * 1024
