"""The retry policy's arithmetic (`backoff_ms`, pure: the jitter draw is given), its
checks in Settings and in a send, and its place in a message's `extras`."""

from __future__ import annotations

import pytest

from timerwheel.store.extras import decode_extras, encode_extras
from timerwheel.wheels.domain import InvalidArgument, SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.retry import RetryKind, RetryPolicy, backoff_ms
from timerwheel.wheels.settings import Settings, SettingsError
from timerwheel.wheels.validation import validate_send

EXPONENTIAL = RetryPolicy(RetryKind.EXPONENTIAL, 1_000, 10_000, 2.0, 0)


def test_exponential_doubles_up_to_its_cap():
    waits = [backoff_ms(EXPONENTIAL, attempt, 0.0) for attempt in range(1, 8)]
    assert waits == [1_000, 2_000, 4_000, 8_000, 10_000, 10_000, 10_000]
    assert backoff_ms(EXPONENTIAL, 10_000, 0.0) == 10_000  # no overflow far out


def test_fixed_waits_the_same_each_time():
    fixed = RetryPolicy(RetryKind.FIXED, 300, 300, 1.0, 0)
    assert {backoff_ms(fixed, attempt, 0.0) for attempt in range(1, 20)} == {300}


@pytest.mark.parametrize("draw", [0.0, 0.25, 0.5, 0.999])
def test_jitter_only_shortens_a_wait_within_its_percent(draw):
    jittered = RetryPolicy(RetryKind.EXPONENTIAL, 1_000, 10_000, 2.0, 20)
    for attempt in range(1, 8):
        plain = backoff_ms(EXPONENTIAL, attempt, 0.0)
        wait = backoff_ms(jittered, attempt, draw)
        assert plain * 0.8 <= wait <= plain
        assert wait == int(plain - plain * 0.2 * draw)


def test_an_initial_wait_of_zero_means_no_backoff():
    assert backoff_ms(RetryPolicy(initial_ms=0, max_ms=0), 5, 0.5) == 0


def test_the_default_policy_is_exponential_from_a_second_to_five_minutes():
    policy = Settings().retry_policy()
    assert policy == RetryPolicy(RetryKind.EXPONENTIAL, 1_000, 300_000, 2.0, 20)
    assert Settings(retry_backoff="fixed").retry_policy().kind is RetryKind.FIXED


@pytest.mark.parametrize(
    ("changes", "message"),
    [({"retry_initial_ms": -1}, "retry_initial_ms=-1"),
     ({"retry_max_ms": 10}, "retry_max_ms=10: must be initial_ms"),
     ({"retry_multiplier": 0.5}, "retry_multiplier=0.5"),
     ({"retry_jitter_percent": 101}, "retry_jitter_percent=101"),
     ({"retry_backoff": "linear"}, "retry_backoff='linear'")],
)  # fmt: skip
def test_settings_refuse_a_bad_retry_value_and_name_it(changes, message):
    with pytest.raises(SettingsError, match=message):
        Settings(**changes)


def test_a_send_with_a_bad_policy_is_refused_naming_the_field():
    spec = SendSpec("t", b"", When(WhenKind.DELAY, 0),
                    options=SendOptions(retry=RetryPolicy(multiplier=0.0)))  # fmt: skip
    with pytest.raises(InvalidArgument, match=r"retry\.multiplier=0\.0"):
        validate_send(spec, 0, Settings())


def test_a_policy_survives_the_extras_column_family():
    options = SendOptions(max_attempts=3, retry=RetryPolicy(RetryKind.FIXED, 250, 250, 1.0, 5))
    assert decode_extras(encode_extras(options)) == options
    assert decode_extras(encode_extras(SendOptions(max_attempts=3))).retry is None
