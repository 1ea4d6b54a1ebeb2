"""The Python client's durations: an int is milliseconds (the `_ms` name says so), a string
must say its unit as on the command line, a `timedelta` is exact."""

from __future__ import annotations

from datetime import timedelta

import pytest

from timerwheel.client import TimerClient
from timerwheel.durations import duration_ms, format_duration_ms


@pytest.mark.parametrize(
    ("value", "ms"),
    [(5_000, 5_000), (0, 0), ("5s", 5_000), ("250ms", 250), (timedelta(minutes=2), 120_000)],
)
def test_ints_are_milliseconds_and_strings_carry_a_unit(value, ms):
    assert duration_ms(value, "delay_ms") == ms


@pytest.mark.parametrize("text", ["5", "5000", " 90 "])
def test_a_string_without_a_unit_is_refused(text):
    with pytest.raises(ValueError, match=r"delay_ms=.*: give a unit, e\.g\. "):
        duration_ms(text, "delay_ms")


def test_a_request_with_a_bare_string_delay_is_refused_before_sending():
    assert TimerClient.request("t", b"x", delay_ms=5_000).delay_ms == 5_000
    assert TimerClient.request("t", b"x", delay_ms="5s").delay_ms == 5_000
    with pytest.raises(ValueError, match=r"delay_ms='5': give a unit, e\.g\. 5s or 5ms"):
        TimerClient.request("t", b"x", delay_ms="5")


@pytest.mark.parametrize(
    ("ms", "text"), [(90_000, "90s"), (300_000, "5m"), (7_200_000, "2h"), (250, "250ms"),
                     (86_400_000, "1d"), (1_500, "1500ms"), (0, "0ms")],
)  # fmt: skip
def test_format_duration_ms_prints_what_can_be_typed_back(ms, text):
    assert format_duration_ms(ms) == text
    assert duration_ms(text) == ms
