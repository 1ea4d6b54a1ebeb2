"""Recurring series: validation and the times of occurrences. Pure (croniter, zoneinfo).

A series fires occurrence 1 at its first time, then occurrence n+1 at the next time of
its schedule after occurrence n's time: `every_ms` later, or the next match of its cron
expression in its time zone (croniter; daylight-saving changes: see `next_after`). Missed
occurrences (their time passed before the writer got to them, e.g. while the server was
down) follow `Repeat.missed`: FIRE_EACH fires each of them, FIRE_ONCE fires the overdue
one and continues with the first time after now. Two bounds narrow that catch-up
(`catch_up_from`, `next_occurrence_ms`): `catch_up_window_ms` skips the missed occurrences
older than that before now (Temporal's catchup window), under either policy;
`max_catch_up` fires at most that many of the rest, the oldest first, then continues with
the first time after now (FIRE_EACH only: FIRE_ONCE is FIRE_EACH with a bound of 1).
Skipped occurrences take no number: `max_count` counts the ones that fired.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, tzinfo
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import croniter

from timerwheel.wheels.domain import InvalidArgument, MissedPolicy, Repeat
from timerwheel.wheels.settings import Settings


def validate_repeat(repeat: Repeat, start_ms: int, settings: Settings, prefix: str) -> int:
    """Check every field of `repeat`; return the series' first occurrence time: `start_ms`
    for an interval, the first cron match at or after it for a cron expression."""
    field = prefix + "repeat."
    if repeat.cron and repeat.every_ms:
        raise InvalidArgument(
            field + "every_ms", repeat.every_ms, "give every_ms or cron, not both"
        )
    if repeat.cron:
        if not croniter.is_valid(repeat.cron):
            raise InvalidArgument(
                field + "cron", repeat.cron,
                "is not a cron expression (minute hour day-of-month month day-of-week)",
            )  # fmt: skip
        _zone(repeat.time_zone, field)
        first = next_after(repeat, start_ms - 1)
    else:
        if repeat.time_zone:
            raise InvalidArgument(field + "time_zone", repeat.time_zone, "applies to cron only")
        if not 0 < repeat.every_ms <= settings.max_delay_ms:
            raise InvalidArgument(
                field + "every_ms", repeat.every_ms,
                f"must be 1..{settings.max_delay_ms} (give every_ms or cron)",
            )  # fmt: skip
        first = start_ms
    if repeat.max_count < 0:
        raise InvalidArgument(field + "max_count", repeat.max_count, "must be 0 (no limit) or more")
    if repeat.end_at_ms < 0 or (repeat.end_at_ms and repeat.end_at_ms < first):
        raise InvalidArgument(
            field + "end_at_ms", repeat.end_at_ms,
            f"ends before the first occurrence at {first} (0: no end)",
        )  # fmt: skip
    _validate_catch_up(repeat, settings, field)
    if first - start_ms > settings.max_delay_ms:
        raise InvalidArgument(
            field + "cron", repeat.cron, f"first matches at {first}, beyond the maximum delay"
        )
    return first


def next_after(repeat: Repeat, t_ms: int) -> int:
    """The first time of the schedule strictly after `t_ms`.

    A cron schedule fires once per wall-clock match in its zone. When the clocks go back,
    the wall times of the repeated hour occur twice; a match among them fires at the first
    of its two instants only (as cronie does for a job at a fixed time of day), so
    `30 1 * * *` in New York fires once on the fall-back day, and `0 * * * *` fires no
    repeated 01:00. Without this, croniter would offer the second instant as a new match
    after the first had fired. When the clocks go forward, croniter fires a match whose
    wall time does not exist (02:30 in the skipped hour) once, at the instant the clocks
    jump to (03:00); matches that fall in the same gap share that one instant, being the
    same time, so they fire once together.
    """
    if not repeat.cron:
        return t_ms + repeat.every_ms
    zone = _zone(repeat.time_zone, "repeat.")
    after_ms = t_ms
    while True:
        start = datetime.fromtimestamp(after_ms / 1000, zone)
        match_ms = int(croniter(repeat.cron, start).get_next(float) * 1000)
        first_ms, repeat_ms = _first_instant_ms(zone, match_ms)
        if first_ms > t_ms:
            return first_ms
        # The match's wall time already came, before the clocks went back: so did every
        # match in the rest of the repeated hour (croniter found none between `t_ms` and
        # this one), so the search resumes where the repeated hour ends.
        after_ms = _end_of_repeat_ms(zone, match_ms, match_ms + repeat_ms) - 1


def _first_instant_ms(zone: tzinfo, t_ms: int) -> tuple[int, int]:
    """The first instant with the wall time (in `zone`) of `t_ms`, and how far apart the
    two instants of a repeated wall time are (0 for a wall time that occurs once)."""
    local = datetime.fromtimestamp(t_ms / 1000, zone)
    if not local.fold:
        return t_ms, 0
    first_offset, second_offset = local.replace(fold=0).utcoffset(), local.utcoffset()
    assert first_offset is not None and second_offset is not None  # a zone has offsets
    shift_ms = (first_offset - second_offset) // timedelta(milliseconds=1)
    return t_ms - shift_ms, shift_ms


def _end_of_repeat_ms(zone: tzinfo, inside_ms: int, beyond_ms: int) -> int:
    """The first instant after `inside_ms` (within a repeated hour, the second pass) whose
    wall time occurs once again; `beyond_ms` is known to be such an instant."""
    while beyond_ms - inside_ms > 1:  # bisect: a transition need not be on a whole minute
        middle = (inside_ms + beyond_ms) // 2
        if datetime.fromtimestamp(middle / 1000, zone).fold:
            inside_ms = middle
        else:
            beyond_ms = middle
    return beyond_ms


MIN_CATCH_UP_WINDOW_MS = 1_000
MAX_CATCH_UP = 1_000  # the most `max_catch_up` may be: one writer batch fires them all


def _validate_catch_up(repeat: Repeat, settings: Settings, field: str) -> None:
    window = repeat.catch_up_window_ms
    if window and not MIN_CATCH_UP_WINDOW_MS <= window <= settings.max_delay_ms:
        raise InvalidArgument(
            field + "catch_up_window_ms", window,
            f"must be 0 (no window) or {MIN_CATCH_UP_WINDOW_MS}..{settings.max_delay_ms}: "
            "a shorter one would skip occurrences that are merely late",
        )  # fmt: skip
    if not 0 <= repeat.max_catch_up <= MAX_CATCH_UP:
        raise InvalidArgument(
            field + "max_catch_up", repeat.max_catch_up, f"must be 0 (no bound) to {MAX_CATCH_UP}"
        )
    if repeat.max_catch_up and repeat.missed is not MissedPolicy.FIRE_EACH:
        raise InvalidArgument(
            field + "max_catch_up", repeat.max_catch_up,
            "applies to missed=MISSED_FIRE_EACH (MISSED_FIRE_ONCE fires one)",
        )  # fmt: skip


def catch_up_from(repeat: Repeat, at_ms: int, now_ms: int) -> int:
    """The first occurrence, from the one due at `at_ms`, that may fire at `now_ms`: `at_ms`
    itself, or (past the catch-up window) the first time of the schedule inside the
    window, which is after `now_ms` when none of the missed ones is inside it."""
    window = repeat.catch_up_window_ms
    if not window or at_ms >= now_ms - window:
        return at_ms
    oldest_ms = now_ms - window
    if not repeat.cron:  # the interval's own grid, not a new one from `oldest_ms`
        return at_ms + repeat.every_ms * -(-(oldest_ms - at_ms) // repeat.every_ms)
    return next_after(repeat, oldest_ms - 1)


def next_occurrence_ms(repeat: Repeat, at_ms: int, now_ms: int, fired: int = 1) -> int:
    """When the occurrence after the one at `at_ms` is due, by the missed policy and its
    bound, `fired` occurrences having fired in this catch-up so far."""
    following = next_after(repeat, at_ms)
    if following > now_ms:
        return following
    bound = repeat.max_catch_up if repeat.missed is MissedPolicy.FIRE_EACH else 1
    if not bound or fired < bound:
        return following
    return first_after(repeat, at_ms, now_ms)


def first_after(repeat: Repeat, at_ms: int, now_ms: int) -> int:
    """The schedule's first time after `now_ms`, from an occurrence at `at_ms` (an interval
    keeps its grid: whole intervals are skipped at once)."""
    if not repeat.cron:
        return at_ms + repeat.every_ms * ((now_ms - at_ms) // repeat.every_ms + 1)
    return next_after(repeat, now_ms)


def finished(repeat: Repeat, next_number: int, next_at_ms: int) -> bool:
    """True when occurrence `next_number`, due at `next_at_ms`, is past the series' end."""
    if repeat.max_count and next_number > repeat.max_count:
        return True
    return bool(repeat.end_at_ms) and next_at_ms > repeat.end_at_ms


@lru_cache(maxsize=256)
def _zone(name: str, field: str) -> tzinfo:
    if not name:
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise InvalidArgument(field + "time_zone", name, "is not an IANA time zone") from None
