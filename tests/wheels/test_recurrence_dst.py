"""Cron series across daylight-saving changes (timerwheel.wheels.recurrence), in virtual
time: the schedule is computed, nothing waits.

The rule (docs/features.md, recurring series): an occurrence fires once per wall-clock
match in the series' zone. When the clocks go back, a wall time of the repeated hour
fires at the first of its two instants only; when they go forward, a wall time that does
not exist fires once, at the instant the clocks jump to.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from timerwheel.wheels.domain import MissedPolicy, Repeat
from timerwheel.wheels.recurrence import next_after, next_occurrence_ms, validate_repeat
from timerwheel.wheels.settings import Settings

# Northern and southern hemisphere, a change at midnight (Santiago: fall-back from 24:00
# to 23:00, spring-forward from 00:00 to 01:00) and a half-hour change (Lord Howe).
ZONES = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Sydney",
    "America/Santiago",
    "Australia/Lord_Howe",
]
YEARS = range(2025, 2031)
HOUR_MS = 3_600_000
MINUTE_MS = 60_000


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


def _local(t_ms: int, zone: str) -> datetime:
    return datetime.fromtimestamp(t_ms / 1000, ZoneInfo(zone))


def _occurrences(cron: str, zone: str, start: datetime, end: datetime) -> list[datetime]:
    """Every occurrence in [start, end) (local wall times in `zone`), as the engine walks
    a series: the first match at or after `start`, then each next one."""
    repeat = Repeat(cron=cron, time_zone=zone)
    tz = ZoneInfo(zone)
    t_ms = next_after(repeat, _ms(start.replace(tzinfo=tz)) - 1)
    found = []
    while t_ms < _ms(end.replace(tzinfo=tz)):
        found.append(_local(t_ms, zone))
        t_ms = next_after(repeat, t_ms)
    return found


def _transitions(zone: str, year: int) -> list[tuple[int, timedelta]]:
    """The zone's offset changes in `year`: (instant in ms, new offset - old offset)."""
    tz = ZoneInfo(zone)
    t_ms = _ms(datetime(year, 1, 1, tzinfo=UTC))
    end_ms = _ms(datetime(year + 1, 1, 1, tzinfo=UTC))
    found = []
    before = datetime.fromtimestamp(t_ms / 1000, tz).utcoffset()
    while t_ms < end_ms:  # changes fall on whole half hours of UTC in these zones
        t_ms += 30 * MINUTE_MS
        after = datetime.fromtimestamp(t_ms / 1000, tz).utcoffset()
        if after != before:
            found.append((t_ms, after - before))  # type: ignore[operator]
        before = after
    return found


def _changes(kind: str) -> list[tuple[str, int, timedelta]]:
    """(zone, instant, shift) of every fall-back ("back") or spring-forward change."""
    return [
        (zone, t_ms, shift)
        for zone in ZONES
        for year in YEARS
        for t_ms, shift in _transitions(zone, year)
        if (shift < timedelta(0)) == (kind == "back")
    ]


def _days(found: list[datetime]) -> list[date]:
    return [moment.date() for moment in found]


# -- the two cases of the issue -------------------------------------------------------------
@pytest.mark.parametrize(
    ("cron", "zone", "day", "first_offset"),
    [
        ("30 1 * * *", "America/New_York", date(2026, 11, 1), timedelta(hours=-4)),
        ("30 2 * * *", "Europe/Berlin", date(2026, 10, 25), timedelta(hours=2)),
    ],
)
def test_a_daily_cron_fires_once_on_the_fall_back_day_at_the_first_instant(
    cron, zone, day, first_offset
):
    found = _occurrences(cron, zone, datetime(2026, 10, 20), datetime(2026, 11, 10))
    assert _days(found) == [date(2026, 10, 20) + timedelta(n) for n in range(21)]
    (on_the_day,) = [moment for moment in found if moment.date() == day]
    assert on_the_day.utcoffset() == first_offset  # summer time: the first of the two


# -- fall-back in several zones and years ---------------------------------------------------
@pytest.mark.parametrize(("zone", "change_ms", "shift"), _changes("back"))
def test_a_repeated_wall_time_fires_once_at_its_first_instant(zone, change_ms, shift):
    # A wall time in the middle of the repeated stretch (an hour; half an hour on Lord Howe).
    repeated = _local(change_ms - shift // timedelta(milliseconds=1) // 2, zone)
    assert _local(_ms(repeated.replace(fold=1)), zone).fold == 1, "not a repeated wall time"
    cron = f"{repeated.minute} {repeated.hour} * * *"
    start = (repeated - timedelta(days=3)).replace(tzinfo=None)
    found = _occurrences(cron, zone, start, start + timedelta(days=7))
    assert _days(found) == [start.date() + timedelta(n) for n in range(7)]
    assert all((m.hour, m.minute) == (repeated.hour, repeated.minute) for m in found)
    (on_the_day,) = [moment for moment in found if moment.date() == repeated.date()]
    assert _ms(on_the_day) < change_ms  # the first instant, before the clocks went back


def test_every_quarter_hour_of_the_repeated_hour_fires_once_in_the_first_pass():
    zone = "America/New_York"
    found = _occurrences("*/15 1 * * *", zone, datetime(2026, 11, 1), datetime(2026, 11, 2))
    assert [(m.hour, m.minute) for m in found] == [(1, 0), (1, 15), (1, 30), (1, 45)]
    assert {m.utcoffset() for m in found} == {timedelta(hours=-4)}  # all before 02:00 EDT


def test_hourly_fires_each_wall_hour_once_on_the_fall_back_day_so_one_gap_is_two_hours():
    zone = "America/New_York"
    found = _occurrences("0 * * * *", zone, datetime(2026, 11, 1), datetime(2026, 11, 2))
    assert [m.hour for m in found] == list(range(24))  # 25 hours long, 24 wall hours
    one, two = found[1], found[2]
    assert (one.hour, two.hour) == (1, 2)
    assert _ms(two) - _ms(one) == 2 * HOUR_MS  # the repeated 01:00 is not fired


def test_a_series_that_reaches_the_repeated_hour_late_fires_no_wall_time_twice():
    """FIRE_ONCE after a stop across the change: the overdue 01:30 (summer time) fires,
    then the series goes on after now, where 01:30 and 01:45 (winter time) came before."""
    zone, tz = "America/New_York", ZoneInfo("America/New_York")
    repeat = Repeat(cron="*/15 1 * * *", time_zone=zone, missed=MissedPolicy.FIRE_ONCE)
    overdue_ms = _ms(datetime(2026, 11, 1, 1, 30, tzinfo=tz))  # EDT
    now_ms = _ms(datetime(2026, 11, 1, 1, 20, tzinfo=tz, fold=1))  # EST, after the change
    following = _local(next_occurrence_ms(repeat, overdue_ms, now_ms), zone)
    assert following == datetime(2026, 11, 2, 1, 0, tzinfo=tz)


def test_a_series_created_in_the_repeated_hour_starts_at_the_next_wall_time_not_yet_come():
    """Its schedule is the first instant of each match: those of the repeated hour passed
    before the series was created."""
    tz = ZoneInfo("America/New_York")
    start_ms = _ms(datetime(2026, 11, 1, 1, 10, tzinfo=tz, fold=1))
    hourly = Repeat(cron="0 * * * *", time_zone="America/New_York")
    first = validate_repeat(hourly, start_ms, Settings(), "")
    assert _local(first, "America/New_York") == datetime(2026, 11, 1, 2, 0, tzinfo=tz)
    quarterly = Repeat(cron="*/15 1 * * *", time_zone="America/New_York")
    first = validate_repeat(quarterly, start_ms, Settings(), "")
    assert _local(first, "America/New_York") == datetime(2026, 11, 2, 1, 0, tzinfo=tz)


# -- spring-forward: a wall time that does not exist ----------------------------------------
@pytest.mark.parametrize(
    ("cron", "zone", "day", "fires_at"),
    [
        ("30 2 * * *", "America/New_York", date(2026, 3, 8), (3, 0)),
        ("30 2 * * *", "Europe/Berlin", date(2026, 3, 29), (3, 0)),
        ("30 2 * * *", "Australia/Sydney", date(2026, 10, 4), (3, 0)),
        ("30 0 * * *", "America/Santiago", date(2026, 9, 6), (1, 0)),
        ("15 2 * * *", "Australia/Lord_Howe", date(2026, 10, 4), (2, 30)),
    ],
)
def test_a_skipped_wall_time_fires_once_when_the_clocks_jump(cron, zone, day, fires_at):
    start = datetime.combine(day - timedelta(days=3), datetime.min.time())
    found = _occurrences(cron, zone, start, start + timedelta(days=7))
    assert _days(found) == [start.date() + timedelta(n) for n in range(7)]
    (on_the_day,) = [moment for moment in found if moment.date() == day]
    assert (on_the_day.hour, on_the_day.minute) == fires_at


@pytest.mark.parametrize(("zone", "change_ms", "shift"), _changes("forward"))
def test_matches_in_the_skipped_wall_times_fire_once_together_at_the_jump(zone, change_ms, shift):
    gap_from = _local(change_ms - 1, zone).replace(tzinfo=None) + timedelta(milliseconds=1)
    gap_to = _local(change_ms, zone).replace(tzinfo=None)  # the wall time jumped to
    assert gap_to - gap_from == shift
    day = gap_from.date()
    quarters = [gap_from.replace(minute=m) for m in (0, 15, 30, 45)]
    # A skipped quarter fires as the jump; the jump's own wall time may be a quarter too.
    expected = sorted({gap_to if gap_from <= q < gap_to else q for q in quarters})
    found = _occurrences(
        f"*/15 {gap_from.hour} * * *", zone,
        datetime.combine(day - timedelta(days=1), datetime.min.time()),
        datetime.combine(day + timedelta(days=2), datetime.min.time()),
    )  # fmt: skip
    on_the_day = [m.replace(tzinfo=None) for m in found if m.date() == day]
    assert on_the_day == expected
    assert _ms(found[[m.date() for m in found].index(day)]) == change_ms
    for other in (day - timedelta(days=1), day + timedelta(days=1)):  # ordinary: four
        assert len([m for m in found if m.date() == other]) == 4


def test_hourly_skips_the_missing_hour_on_the_spring_forward_day():
    found = _occurrences(
        "0 * * * *", "America/New_York", datetime(2026, 3, 8), datetime(2026, 3, 9)
    )
    assert [m.hour for m in found] == [0, 1, *range(3, 24)]  # 23 hours long


# -- ordinary days are untouched -----------------------------------------------------------
@pytest.mark.parametrize("zone", ZONES)
@pytest.mark.parametrize("cron", ["30 1 * * *", "30 2 * * *", "0 0 * * *", "45 23 * * *"])
def test_a_daily_cron_fires_exactly_once_on_each_day_of_the_year(zone, cron):
    minute, hour = (int(field) for field in cron.split()[:2])
    found = _occurrences(cron, zone, datetime(2026, 1, 1), datetime(2027, 1, 1))
    assert _days(found) == [date(2026, 1, 1) + timedelta(n) for n in range(365)]
    for moment in found:  # a wall time moves only when it does not exist: to the jump
        wall = moment.replace(hour=hour, minute=minute, tzinfo=None)
        if moment.replace(tzinfo=None) != wall:
            before = _local(_ms(moment) - 1, zone).replace(tzinfo=None)
            assert before < wall < moment.replace(tzinfo=None), f"{moment}: {wall} exists"
