"""Durations as people write them (`250ms`, `90s`, `5m`, `2h`, `3d`) -> integer milliseconds.

One parser for every edge that takes a duration: the settings loader (`timerwheel.cli.config`), the
command line (`--delay 90s`) and the Python client (`send(..., delay_ms="2s")`). Pure, and part of
the client package, so the client needs nothing of the server to use it.

A duration written as text must carry its unit: a bare `5` is refused, because a person who
types `--delay 5` or `ack_timeout_ms = "10"` means seconds as often as milliseconds, and
guessing wrong is silent (a timer fires 5 ms later, not 5 s). Only the Python client's int
stays a number of milliseconds: there the unit is in the parameter's name (`delay_ms=5000`).
"""

from __future__ import annotations

import re
from datetime import timedelta

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
HOUR_MS = 60 * MINUTE_MS
DAY_MS = 24 * HOUR_MS

_UNITS_MS = {"ms": 1, "s": SECOND_MS, "m": MINUTE_MS, "h": HOUR_MS, "d": DAY_MS}
_DURATION_RE = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)?")


def parse_duration_ms(text: str, name: str = "duration") -> int:
    """`90s`, `5m`, `2h`, `3d`, `250ms` or `1.5s` -> integer ms; a bare number is refused.

    `name` is the field or flag the text came from: every error message starts with
    `name=value` and says how to write it instead.
    """
    cleaned = text.strip().lower()
    shown = f"{name}={text!r}"
    if cleaned.startswith("-"):
        positive = cleaned.lstrip("-") or "5s"
        raise ValueError(f"{shown}: negative; a duration is 0 or more, e.g. {positive}")
    match = _DURATION_RE.fullmatch(cleaned)
    if match is None:
        raise ValueError(f"{shown}: not a duration; use e.g. 250ms, 90s, 5m, 2h or 3d")
    number, unit = match.groups()
    if unit is None:
        raise ValueError(f"{shown}: give a unit, e.g. {number}s or {number}ms")
    value = float(number) * _UNITS_MS[unit]
    if value != int(value):
        raise ValueError(f"{shown}: is not a whole number of milliseconds")
    return int(value)


def duration_ms(value: int | str | timedelta, name: str = "duration") -> int:
    """An int (ms, passed through), a duration string with its unit, or a `timedelta` -> ms.

    The int is milliseconds by the `_ms` name of every parameter that takes one; a string
    has no such name to lean on, so it must say its unit (`"5s"`; `"5"` is refused).
    """
    if isinstance(value, bool):
        raise ValueError(f"{name}={value!r}: expected milliseconds or a duration like '2s'")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        return parse_duration_ms(value, name)
    if isinstance(value, timedelta):
        ms = value / timedelta(milliseconds=1)
        if ms < 0 or ms != int(ms):
            raise ValueError(f"{name}={value!r}: must be a whole, non-negative number of ms")
        return int(ms)
    raise ValueError(f"{name}={value!r}: expected milliseconds or a duration like '2s'")


def format_duration_ms(ms: int) -> str:
    """Integer ms -> the largest unit that says it exactly: 90000 -> `90s`, 300000 -> `5m`.

    The inverse of `parse_duration_ms`, so what is printed can be typed back.
    """
    for unit in ("d", "h", "m", "s"):
        if ms and ms % _UNITS_MS[unit] == 0:
            return f"{ms // _UNITS_MS[unit]}{unit}"
    return f"{ms}ms"
