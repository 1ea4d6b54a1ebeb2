"""Durations as people write them (`250ms`, `90s`, `5m`, `2h`, `3d`) -> integer milliseconds.

One parser for every edge that takes a duration: the settings loader (`timerwheel.cli.config`), the
command line (`--delay 90s`) and the Python client (`send(..., delay_ms="2s")`). Pure, and part of
the client package, so the client needs nothing of the server to use it.
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
    """`90s`, `5m`, `2h`, `3d`, `250ms`, `1.5s` or plain milliseconds -> integer ms.

    `name` is the field or flag the text came from: every error message starts with it.
    """
    cleaned = text.strip().lower()
    if cleaned.startswith("-"):
        raise ValueError(f"{name}={text!r}: must not be negative")
    match = _DURATION_RE.fullmatch(cleaned)
    if match is None:
        raise ValueError(
            f"{name}={text!r}: not a duration; use e.g. 250ms, 90s, 5m, 2h, 3d or plain ms"
        )
    number, unit = match.groups()
    value = float(number) * _UNITS_MS[unit or "ms"]
    if value != int(value):
        raise ValueError(f"{name}={text!r}: is not a whole number of milliseconds")
    return int(value)


def duration_ms(value: int | str | timedelta, name: str = "duration") -> int:
    """An int (ms, passed through), a duration string or a `timedelta` -> integer ms."""
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
