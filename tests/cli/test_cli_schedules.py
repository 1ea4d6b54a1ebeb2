"""`timerwheel pause | resume` and the catch-up flags of `send`, against a live server on
loopback (issue 78, "Schedules")."""

from __future__ import annotations

import json


def test_pause_and_resume_a_series(cli, client):
    code, _, err = cli("send", "--topic", "jobs", "--id", "nightly", "--cron", "0 5 * * *")
    assert code == 0, err

    code, out, err = cli("pause", "nightly")
    assert (code, err) == (0, "")
    assert out == "nightly: paused; its occurrences are skipped until `timerwheel resume nightly`\n"
    assert client.get("nightly").paused
    code, out, _ = cli("pause", "nightly")
    assert (code, out) == (0, "nightly: already paused; nothing changed\n")

    code, out, _ = cli("get", "nightly")
    assert "(paused: skipped until resumed)" in out
    answer = json.loads(cli("get", "nightly", "--json")[1])
    assert answer["paused"] is True

    deliver_at_ms = client.get("nightly").deliver_at_ms
    code, out, _ = cli("resume", "nightly", "--json")
    assert code == 0
    assert json.loads(out) == {
        "series_id": "nightly", "paused": False, "changed": True, "deliver_at_ms": deliver_at_ms,
    }  # fmt: skip
    code, out, _ = cli("resume", "nightly")
    assert code == 0 and out.startswith("nightly: not paused; nothing changed (next occurrence at")
    assert not client.get("nightly").paused


def test_pause_refusals_exit_1_with_the_servers_reason(cli):
    cli("send", "--topic", "jobs", "--id", "once", "--delay", "1h")
    code, _, err = cli("pause", "once")
    assert code == 1 and "not a recurring series" in err
    code, _, err = cli("resume", "nobody")
    assert code == 1 and "series_id='nobody': no such timer" in err


def test_send_takes_catch_up_bounds_and_get_shows_them(cli, client):
    code, _, err = cli(
        "send", "--topic", "jobs", "--id", "tick", "--every", "1h", "--delay", "1h",
        "--missed", "each", "--catch-up-window", "10m", "--max-catch-up", "3",
    )  # fmt: skip
    assert code == 0, err
    repeat = client.get("tick").repeat
    assert (repeat.catch_up_window_ms, repeat.max_catch_up) == (600_000, 3)
    lines = dict(line.split(None, 1) for line in cli("get", "tick")[1].splitlines() if line)
    assert lines["schedule"] == "every 1h, missed: fire each (at most 3), within 10m"

    code, _, err = cli("send", "--topic", "jobs", "--id", "t2", "--every", "1h",
                       "--catch-up-window", "10")  # fmt: skip
    assert code == 2 and "--catch-up-window='10': give a unit" in err
    code, _, err = cli("send", "--topic", "jobs", "--id", "t3", "--every", "1h",
                       "--max-catch-up", "2")  # fmt: skip
    assert code == 1 and "repeat.max_catch_up=2" in err


def test_a_cancelled_series_is_sent_again_with_if_exists_replace(cli, client):
    cli("send", "--topic", "jobs", "--id", "daily", "--every", "1d", "--delay", "1h")
    cli("cancel", "daily")
    code, _, err = cli("send", "--topic", "jobs", "--id", "daily", "--every", "1d",
                       "--delay", "1h", "--body", "v2")  # fmt: skip
    assert code == 1 and "already used by a different message" in err  # REJECT, as before
    code, out, err = cli("send", "--topic", "jobs", "--id", "daily", "--every", "1d",
                         "--delay", "1h", "--body", "v2", "--if-exists", "replace")  # fmt: skip
    assert code == 0, err
    assert out.startswith("sent daily")
    assert client.get("daily").state.name == "SCHEDULED"
