"""Per-topic delivery defaults as settings: parsed from a TOML table, validated once with
the bad key and value named, and resolved field by field over the server's retry_*."""

from __future__ import annotations

import pickle

import pytest

from timerwheel.wheels.retry import RetryKind, RetryPolicy
from timerwheel.wheels.settings import Settings, SettingsError
from timerwheel.wheels.topic_policy import (
    TopicSettings,
    by_topic,
    topic_policy,
    topics_from_value,
)


def test_a_table_becomes_typed_topic_settings():
    retry = {"backoff": "fixed", "initial_ms": "2s", "max_ms": 600_000, "multiplier": 3,
             "jitter_percent": 10}  # fmt: skip
    table = {
        "orders": {"max_attempts": 5, "retry": retry},
        "audit.v2": {"retry": {"initial_ms": "250ms"}},
    }
    assert topics_from_value(table) == (
        TopicSettings("orders", 5, "fixed", 2_000, 600_000, 3.0, 10),
        TopicSettings("audit.v2", initial_ms=250),
    )


def test_text_is_read_as_a_toml_table():
    text = 'orders = {max_attempts = 5, retry = {initial_ms = "2s"}}'
    assert topics_from_value(text) == (TopicSettings("orders", 5, initial_ms=2_000),)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ({"orders": {"retry": {"initial_ms": "10"}}},
         "topics.\"orders\".retry.initial_ms='10': give a unit, e.g. 10s or 10ms"),
        ({"orders": {"retry": {"initial_ms": "-1s"}}}, "retry.initial_ms='-1s': negative"),
        ({"orders": {"retry": {"initial": "1s"}}},
         "topics.\"orders\".retry: unknown key 'initial'; known: backoff, initial_ms"),
        ({"orders": {"max_attempt": 3}}, "topics.\"orders\": unknown key 'max_attempt'"),
        ({"orders": {"max_attempts": "3"}},
         "topics.\"orders\".max_attempts='3': expected an integer"),
        ({"orders": {"max_attempts": True}}, "max_attempts=True: expected an integer"),
        ({"orders": {"retry": {"backoff": "linear"}}},
         "topics.\"orders\".retry.backoff='linear': must be 'exponential' or 'fixed'"),
        ({"orders": {"retry": {"multiplier": "x2"}}}, "retry.multiplier='x2': expected a number"),
        ({"orders": {"retry": "fast"}}, "topics.\"orders\".retry='fast': expected a table"),
        ({"orders": 3}, "topics.\"orders\"=3: expected a table"),
        ("orders = ", "not a TOML table"),
        (7, "topics=7: expected a table of topics"),
    ],
)  # fmt: skip
def test_a_bad_table_names_the_key_and_the_value(value, shown):
    with pytest.raises(ValueError) as info:
        topics_from_value(value)
    assert shown in str(info.value)


@pytest.mark.parametrize(
    ("topic", "shown"),
    [
        (TopicSettings("orders", max_attempts=-1),
         "topics.\"orders\".max_attempts=-1: must be 0 (unlimited) or more"),
        (TopicSettings("orders", initial_ms=25 * 3600 * 1000),
         "topics.\"orders\".retry.initial_ms=90000000: must be 0..86400000"),
        # the server's cap (5m) is below the topic's first wait: named, with both values
        (TopicSettings("orders", initial_ms=600_000),
         "topics.\"orders\".retry.max_ms=300000: must be initial_ms (600000).."),
        (TopicSettings("orders", multiplier=0.5),
         "topics.\"orders\".retry.multiplier=0.5: must be 1..100"),
        (TopicSettings("orders", jitter_percent=101),
         "topics.\"orders\".retry.jitter_percent=101: must be 0..100"),
        (TopicSettings("or ders"), "topics.\"or ders\": a topic may hold only letters"),
        (TopicSettings("o" * 128), "the topic is 128 characters; at most 127"),
    ],
)  # fmt: skip
def test_settings_refuse_a_bad_topic_naming_the_value(topic, shown):
    with pytest.raises(SettingsError) as info:
        Settings(topics=(topic,))
    assert shown in str(info.value)


def test_a_topic_given_twice_is_refused():
    with pytest.raises(SettingsError) as info:
        Settings(topics=(TopicSettings("orders", 1), TopicSettings("orders", 2)))
    assert str(info.value) == 'topics."orders": given twice'


def test_unset_fields_are_the_server_s_and_a_table_without_retry_has_none():
    settings = Settings(
        retry_backoff="exponential", retry_initial_ms=500, retry_max_ms=60_000,
        retry_multiplier=3.0, retry_jitter_percent=0,
        topics=(TopicSettings("capped", max_ms=4_000), TopicSettings("limited", max_attempts=2)),
    )  # fmt: skip
    server = settings.retry_policy()
    assert topic_policy(settings.topics[0], server) == RetryPolicy(
        RetryKind.EXPONENTIAL, 500, 4_000, 3.0, 0
    )
    assert by_topic(settings) == {
        "capped": (settings.max_attempts, RetryPolicy(RetryKind.EXPONENTIAL, 500, 4_000, 3.0, 0)),
        "limited": (2, None),  # the server's policy, its own limit
    }


def test_settings_with_topics_cross_a_process_boundary_intact():
    """The delivery process of `serve --workers N` gets the settings pickled."""
    settings = Settings(topics=(TopicSettings("orders", 3, "fixed", 2_000),))
    assert pickle.loads(pickle.dumps(settings)) == settings
