"""`timerwheel reschedule` (and the other feature commands) against a live server."""

from __future__ import annotations

import json

import pytest
from helpers.time_of_day import wall_ms

pytestmark = pytest.mark.wallclock


def test_reschedule_by_delay_time_and_level(cli, client):
    message_id = client.send("orders", b"x", delay_ms=3_600_000).message_id
    before = wall_ms()
    code, out, _ = cli("reschedule", message_id, "--delay", "5m")
    new_at = client.get(message_id).deliver_at_ms
    assert code == 0 and f"({new_at} ms)" in out
    assert before + 300_000 <= new_at <= wall_ms() + 300_000

    code, _, _ = cli("reschedule", message_id, "--at", str(new_at + 1_000))
    assert code == 0 and client.get(message_id).deliver_at_ms == new_at + 1_000
    code, _, _ = cli("reschedule", message_id, "--level", "18")  # 2 h
    assert code == 0 and client.get(message_id).deliver_at_ms >= before + 7_200_000


def test_reschedule_refusals_exit_1_or_2(cli, client):
    code, _, err = cli("reschedule", "no-such-id", "--delay", "5m")
    assert code == 1 and "NOT_FOUND" in err and "message_id='no-such-id'" in err
    fired = client.send("orders", b"x", delay_ms=0).message_id
    code, _, err = cli("reschedule", fired, "--delay", "5m")
    assert code == 1 and "FAILED_PRECONDITION" in err and "FIRED" in err
    code, out, err = cli("reschedule", fired, "--delay", "soon")
    assert code == 2 and "--delay='soon'" in err and out == ""


def test_count_total_range_and_json(cli, client):
    base = wall_ms() + 3_600_000
    base -= base % 60_000
    for offset in (0, 60_000, 120_000):
        client.send("counted", b"x", deliver_at_ms=base + offset)
    code, out, _ = cli("count", "--topic", "counted")
    assert code == 0 and out.strip() == "3 pending in counted"
    code, out, _ = cli("count", "--topic", "counted", "--from", str(base), "--to",
                       str(base + 120_000), "--json")  # fmt: skip
    assert code == 0 and json.loads(out) == {
        "topic": "counted", "pending": 2, "from_ms": base, "to_ms": base + 120_000,
    }  # fmt: skip
    code, _, err = cli("count", "--topic", "counted", "--from", "200", "--to", "100")
    assert code == 1 and "INVALID_ARGUMENT" in err and "to_ms=100" in err


def test_send_with_repeat_replace_and_dead_letter_options(cli, client):
    code, out, err = cli("send", "--topic", "jobs", "--id", "nightly", "--cron", "0 5 * * *",
                         "--tz", "Europe/Paris", "--max-count", "3", "--json")  # fmt: skip
    assert code == 0, err
    series = client.get("nightly")
    assert (series.repeat.cron, series.repeat.time_zone, series.repeat.max_count) == (
        "0 5 * * *", "Europe/Paris", 3,
    )  # fmt: skip
    assert json.loads(out)["deliver_at_ms"] == series.deliver_at_ms
    code, _, _ = cli(
        "send", "--topic", "jobs", "--id", "tick", "--every", "90s", "--missed", "each"
    )
    assert code == 0 and client.get("tick").repeat.every_ms == 90_000
    assert client.get("tick").repeat.missed == 1

    code, _, _ = cli("send", "--topic", "jobs", "--id", "deb", "--delay", "1h", "--body", "v1")
    code, _, _ = cli("send", "--topic", "jobs", "--id", "deb", "--delay", "2h", "--body", "v2",
                     "--if-exists", "replace", "--max-attempts", "3")  # fmt: skip
    assert code == 0 and client.get("deb").body == b"v2"

    code, _, err = cli("send", "--topic", "jobs", "--id", "bad", "--cron", "nope")
    assert code == 1 and "repeat.cron='nope'" in err
    code, _, err = cli("send", "--topic", "jobs", "--delay", "1s", "--max-attempts", "-1")
    assert code == 1 and "max_attempts=-1" in err
    code, _, err = cli("send", "--topic", "jobs")
    assert code == 2 and "--delay, --at, --level" in err
