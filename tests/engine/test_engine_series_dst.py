"""A cron series through the engine across a daylight-saving change, in virtual time on
real RocksDB: the occurrences the engine fires are those of the schedule, one per wall-clock
match (the rule itself: tests/wheels/test_recurrence_dst.py)."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from helpers.engines import engine_factory

from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import MissedPolicy, Repeat, SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import HOUR_MS

NEW_YORK = ZoneInfo("America/New_York")


def _ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


@pytest.mark.parametrize(
    ("step_hours", "missed"),
    [(1, MissedPolicy.FIRE_ONCE), (6, MissedPolicy.FIRE_EACH)],
    ids=["hourly-steps", "six-hour-steps-fire-each"],
)
def test_a_daily_series_delivers_one_occurrence_on_the_fall_back_day(tmp_path, step_hours, missed):
    """`30 1 * * *` in New York from the day before the change to the day after: one
    occurrence a day, the one on the change day at 01:30 summer time, numbered in order.
    With six-hour steps the writer first sees the change day after both 01:30s have passed:
    FIRE_EACH fires every missed occurrence, and 01:30 winter time is not one."""
    clock = VirtualClock(_ms(datetime(2026, 10, 31, 0, 0, tzinfo=NEW_YORK)))
    with engine_factory(tmp_path / "data", clock) as make:
        engine = make()
        repeat = Repeat(cron="30 1 * * *", time_zone="America/New_York", missed=missed)
        engine.send(
            SendSpec(
                "reports", b"daily", When(WhenKind.DELAY, 0), message_id="daily",
                options=SendOptions(repeat=repeat),
            )
        )  # fmt: skip
        end_ms = _ms(datetime(2026, 11, 3, 0, 0, tzinfo=NEW_YORK))
        while clock.now_ms() < end_ms:
            clock.advance(min(step_hours * HOUR_MS, end_ms - clock.now_ms()))
            engine.run_until_idle()
        fired = [f.timer for f in engine.fetch_fired("reports", 0, 100)]
    ids = [timer.message_id for timer in fired]
    assert ids == ["daily#1", "daily#2", "daily#3"]
    times = [datetime.fromtimestamp(t.deliver_at_ms / 1000, NEW_YORK) for t in fired]
    assert [t.date() for t in times] == [date(2026, 10, 31) + timedelta(n) for n in range(3)]
    assert {(t.hour, t.minute) for t in times} == {(1, 30)}
    assert times[1].utcoffset() == timedelta(hours=-4)  # the first of the two 01:30s
