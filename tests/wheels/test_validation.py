"""Validation of sends, pure: each refusal names the field and the value."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from timerwheel.wheels.domain import IfExists, InvalidArgument, SendSpec, When, WhenKind
from timerwheel.wheels.settings import DAY_MS, Settings
from timerwheel.wheels.validation import (
    MAX_MESSAGE_REF_LEN,
    resolve_deliver_at_ms,
    validate_message_id,
    validate_message_refs,
    validate_send,
    validate_sends,
)

NOW = 1_700_000_000_000
SETTINGS = Settings()


def spec(**overrides):
    fields = {"topic": "orders", "body": b"x", "when": When(WhenKind.DELAY, 1000)}
    fields.update(overrides)
    return SendSpec(**fields)


BAD_SENDS = [
    (spec(topic=""), "topic", "''"),
    (spec(topic="a" * 128), "topic", "aaaa"),
    (spec(topic="or ders"), "topic", "'or ders'"),
    (spec(topic="ord\x00ers"), "topic", "ord"),
    (spec(body=b"x" * (4 * 1024 * 1024 + 1)), "body", "4194305 bytes"),
    (spec(properties={str(i): "v" for i in range(65)}), "properties", "65 entries"),
    (spec(properties={"k": "v" * 16385}), "properties['k']", "vvvv"),
    (spec(properties={"": "v"}), "properties['']", "''"),
    (spec(when=When(WhenKind.DELAY, -1)), "delay_ms", "-1"),
    (spec(when=When(WhenKind.DELAY, 401 * DAY_MS)), "delay_ms", str(401 * DAY_MS)),
    (spec(when=When(WhenKind.LEVEL, 0)), "delay_level", "0"),
    (spec(when=When(WhenKind.LEVEL, 19)), "delay_level", "19"),
    (
        spec(when=When(WhenKind.DELIVER_AT, NOW - DAY_MS - 1)),
        "deliver_at_ms",
        str(NOW - DAY_MS - 1),
    ),
    (spec(when=When(WhenKind.DELIVER_AT, NOW + 401 * DAY_MS)), "deliver_at_ms", "beyond"),
    (spec(message_id="has space"), "message_id", "'has space'"),
    (spec(message_id="x" * 129), "message_id", "129 characters"),
]


@pytest.mark.parametrize(("bad", "field", "shown"), BAD_SENDS)
def test_bad_sends_name_field_and_value(bad, field, shown):
    with pytest.raises(InvalidArgument) as caught:
        validate_send(bad, NOW, SETTINGS)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}=")
    assert shown in str(caught.value)


@pytest.mark.parametrize(("bad", "field", "shown"), BAD_SENDS)
def test_batch_validation_refuses_the_same_and_names_the_message(bad, field, shown):
    with pytest.raises(InvalidArgument) as alone:
        validate_sends([bad], NOW, SETTINGS)
    assert alone.value.field == field  # a batch of one: no index, as for a single Send
    with pytest.raises(InvalidArgument) as in_batch:
        validate_sends([spec(), spec(), bad, spec()], NOW, SETTINGS)
    assert in_batch.value.field == f"messages[2].{field}"
    assert shown in str(in_batch.value)


whens = st.one_of(
    st.builds(When, st.just(WhenKind.DELAY), st.integers(0, 400 * DAY_MS)),
    st.builds(When, st.just(WhenKind.LEVEL), st.integers(1, 18)),
    st.builds(When, st.just(WhenKind.DELIVER_AT), st.integers(NOW - DAY_MS, NOW + 400 * DAY_MS)),
)
good_specs = st.builds(
    SendSpec,
    topic=st.sampled_from(["orders", "a.b-c_d", "x" * 127]),
    body=st.binary(max_size=64),
    when=whens,
    properties=st.dictionaries(
        st.text("abc", min_size=1, max_size=3), st.text(max_size=5), max_size=2
    ),
    message_id=st.sampled_from(["", "", "order-1"]),
    if_exists=st.just(IfExists.REJECT),
    options=st.none(),  # builds() fills a NamedTuple's defaulted fields too: none here
)


@given(st.lists(good_specs, max_size=20))
def test_batch_validation_resolves_each_send_as_validate_send_does(specs):
    assert validate_sends(specs, NOW, SETTINGS) == [validate_send(s, NOW, SETTINGS) for s in specs]


def test_batch_fields_carry_the_index_prefix():
    with pytest.raises(InvalidArgument) as caught:
        validate_send(spec(topic=""), NOW, SETTINGS, prefix="messages[3].")
    assert caught.value.field == "messages[3].topic"


@pytest.mark.parametrize(
    ("when", "expected"),
    [
        (When(WhenKind.DELAY, 0), NOW),
        (When(WhenKind.DELAY, 90_000), NOW + 90_000),
        (When(WhenKind.LEVEL, 1), NOW + 1_000),
        (When(WhenKind.LEVEL, 5), NOW + 60_000),
        (When(WhenKind.LEVEL, 18), NOW + 7_200_000),
        (When(WhenKind.DELIVER_AT, NOW - 5_000), NOW - 5_000),  # past: fires at once
        (When(WhenKind.DELIVER_AT, NOW + 400 * DAY_MS), NOW + 400 * DAY_MS),
    ],
)
def test_when_resolves_to_an_absolute_time(when, expected):
    assert resolve_deliver_at_ms(when, NOW, SETTINGS) == expected


def test_delay_levels_are_configurable():
    settings = Settings(delay_levels_ms=(250, 500))
    assert resolve_deliver_at_ms(When(WhenKind.LEVEL, 2), NOW, settings) == NOW + 500
    with pytest.raises(InvalidArgument, match=r"delay_level=3: must be 1\.\.2"):
        resolve_deliver_at_ms(When(WhenKind.LEVEL, 3), NOW, settings)


def test_good_message_ids_pass():
    for message_id in ("order-1:timeout", "A1B2C3", "user@tenant.x_y"):
        assert validate_message_id(message_id) == message_id


@pytest.mark.parametrize(
    ("ids", "field", "shown"),
    [
        (["ok", ""], "message_ids[1]", "''"),
        (["ok", "x y"], "message_ids[1]", "'x y'"),
        (["ok", "ok", "a" * (MAX_MESSAGE_REF_LEN + 1)], "message_ids[2]", "characters"),
        (["ok", "a\nb"], "message_ids[1]", "'a\\nb'"),  # not a separator in disguise
        (["\n"], "message_ids[0]", "'\\n'"),
        (["é"], "message_ids[0]", "'é'"),
    ],
)
def test_many_ids_are_checked_as_each_one_is_and_the_bad_one_named(ids, field, shown):
    with pytest.raises(InvalidArgument) as refused:
        validate_message_refs(ids)
    assert refused.value.field == field and shown in str(refused.value)
    for good in ([], ["a" * MAX_MESSAGE_REF_LEN, "s#12", "A-b_c.d:e@f"]):
        validate_message_refs(good)


def test_refused_long_topics_are_not_kept_in_the_topic_cache():
    """A refused 1 MB topic must not stay in memory (the cache once kept each one)."""
    from timerwheel.wheels.validation import _topic_problem, validate_topic

    settings = Settings()
    _topic_problem.cache_clear()
    for n in range(3):
        with pytest.raises(InvalidArgument, match="at most 127"):
            validate_topic(str(n) * 1_000_000, settings)
    assert _topic_problem.cache_info().currsize == 0
    validate_topic("orders", settings)
    assert _topic_problem.cache_info().currsize == 1
