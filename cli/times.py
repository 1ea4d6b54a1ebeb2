"""Times on the command line: read from flags (`parse_time_ms`, `parse_delay_ms`), printed
(`format_ms`). Durations need their unit here as everywhere a person types one."""

from __future__ import annotations

from datetime import UTC, datetime

from timerwheel.durations import parse_duration_ms


def parse_time_ms(text: str, name: str) -> int:
    """Epoch ms (`1767225600000`), `now`, `+5m` from now, or ISO 8601 (UTC if no zone)."""
    cleaned = text.strip()
    now_ms = datetime.now(UTC).timestamp() * 1000
    if cleaned == "now":
        return int(now_ms)
    if cleaned.startswith("+"):
        if cleaned[1:].isdigit():  # `+5` is 5 what? The same rule as --delay: say the unit
            raise ValueError(f"{name}={text!r}: give a unit, e.g. {cleaned}s or {cleaned}m")
        return int(now_ms) + parse_duration_ms(cleaned[1:], name)
    if cleaned.isdigit():
        return int(cleaned)
    try:
        moment = datetime.fromisoformat(cleaned)
    except ValueError:
        raise ValueError(
            f"{name}={text!r}: not a time; use epoch ms, now, +DURATION or ISO 8601"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp() * 1000)


def parse_delay_ms(text: str, name: str) -> int:
    """A delay flag (`--delay 90s`): a duration with its unit, from now; never negative.

    A negative delay gets its own message: it is what `--delay -5s` (a time in the past)
    means, and the fix is another flag, not another number.
    """
    if text.strip().startswith("-"):
        raise ValueError(
            f"{name}={text.strip()!r}: a negative delay; give 0s or more "
            "(--delay 0s delivers now; --at takes an absolute time)"
        )
    return parse_duration_ms(text, name)


def format_ms(epoch_ms: int) -> str:
    if not epoch_ms:
        return "-"
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
