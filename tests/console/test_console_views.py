"""The console's timer view of a series: its schedule and next occurrence, as `get` says them."""

from __future__ import annotations

from datetime import UTC, datetime

from timerwheel.console.views import timer_json
from timerwheel.v1 import timerwheel_pb2 as pb

NOW_MS = 1_800_000_000_000


def test_a_series_shows_its_schedule_and_next_occurrence():
    message = pb.TimerMessage(
        message_id="nightly", topic="jobs", state=pb.SCHEDULED, deliver_at_ms=NOW_MS + 60_000,
        repeat=pb.Repeat(cron="0 5 * * *", time_zone="Europe/Paris", max_count=3),
        next_occurrence=4,
    )  # fmt: skip
    view = timer_json(message, NOW_MS)
    assert view["schedule"] == "cron '0 5 * * *' in Europe/Paris, at most 3 occurrence(s), " + (
        "missed: fire once"
    )
    due = datetime(2027, 1, 15, 8, 1, tzinfo=UTC)  # NOW_MS + 60 s, as UTC
    assert due.timestamp() * 1000 == NOW_MS + 60_000
    assert view["next"] == f"#4 (nightly#4) at {due:%Y-%m-%dT%H:%M:%S}.000Z"
    assert view["repeat"]["cron"] == "0 5 * * *" and view["repeat"]["max_count"] == 3
    assert view["next_occurrence"]["message_id"] == "nightly#4"
    assert view["next_occurrence"]["at"]["relative"] == "in 1m"


def test_a_one_off_timer_has_no_schedule():
    view = timer_json(pb.TimerMessage(message_id="x", deliver_at_ms=NOW_MS), NOW_MS)
    assert (view["schedule"], view["next"], view["repeat"], view["next_occurrence"]) == (
        None, None, None, None,
    )  # fmt: skip
