"""Per-topic defaults through timerwheel.cli.config: the TOML file's `[topics."x"]`
tables, the environment and `--set` (TOML text), errors naming the source, the key and
the value."""

from __future__ import annotations

import pytest

from timerwheel.cli.config import load_settings, parse_assignment
from timerwheel.wheels.retry import RetryKind, RetryPolicy
from timerwheel.wheels.settings import SettingsError
from timerwheel.wheels.topic_policy import TopicSettings, by_topic

CONFIG = """
retry_initial_ms = "500ms"
max_attempts = 10

[topics."orders"]
max_attempts = 3

[topics."orders".retry]
backoff = "fixed"
initial_ms = "2s"

[topics."billing.v2".retry]
max_ms = 60000          # a TOML integer of an _ms key: milliseconds
jitter_percent = 0
"""


def test_topic_tables_load_from_the_toml_file(tmp_path):
    config = tmp_path / "tw.toml"
    config.write_text(CONFIG)
    settings = load_settings(str(config), env={})
    assert settings.topics == (
        TopicSettings("orders", 3, "fixed", 2_000),
        TopicSettings("billing.v2", max_ms=60_000, jitter_percent=0),
    )
    assert by_topic(settings) == {
        "orders": (3, RetryPolicy(RetryKind.FIXED, 2_000, 300_000, 2.0, 20)),
        # unset: the server's retry_* (its initial 500ms from the same file) and max_attempts
        "billing.v2": (10, RetryPolicy(RetryKind.EXPONENTIAL, 500, 60_000, 2.0, 0)),
    }


def test_the_environment_and_set_take_the_table_as_toml_text(tmp_path):
    text = 'orders = {max_attempts = 2, retry = {initial_ms = "3s"}}'
    expected = (TopicSettings("orders", 2, initial_ms=3_000),)
    assert load_settings(env={"TIMERWHEEL_TOPICS": text}).topics == expected
    name, value = parse_assignment(f"topics={text}")
    assert (name, value) == ("topics", expected)
    config = tmp_path / "tw.toml"
    config.write_text(CONFIG)
    # the environment's table replaces the file's whole, as any setting does
    assert load_settings(str(config), env={"TIMERWHEEL_TOPICS": text}).topics == expected


@pytest.mark.parametrize(
    ("toml", "shown"),
    [
        ('[topics."orders".retry]\ninitial_ms = "10"\n',
         "config file '{path}': topics.\"orders\".retry.initial_ms='10': give a unit, e.g. 10s"),
        ('[topics."orders"]\nretries = 3\n',
         "config file '{path}': topics.\"orders\": unknown key 'retries'"),
        ('[topics."orders".retry]\nmultiplier = 0.5\n',
         "topics.\"orders\".retry.multiplier=0.5: must be 1..100"),  # Settings validates
        ('[topics."bad topic"]\nmax_attempts = 1\n',
         "topics.\"bad topic\": a topic may hold only"),
    ],
)  # fmt: skip
def test_a_bad_topic_table_names_the_source_the_key_and_the_value(tmp_path, toml, shown):
    config = tmp_path / "tw.toml"
    config.write_text(toml)
    with pytest.raises(SettingsError) as info:
        load_settings(str(config), env={})
    assert shown.format(path=str(config)) in str(info.value)


def test_bad_text_from_the_environment_names_the_variable():
    with pytest.raises(SettingsError) as info:
        load_settings(env={"TIMERWHEEL_TOPICS": "orders = {retry = {max_ms = '1'}}"})
    assert str(info.value).startswith("TIMERWHEEL_TOPICS: topics.\"orders\".retry.max_ms='1'")
