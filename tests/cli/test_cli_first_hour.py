"""What a new user tripped over in the first hour (issue 77), each checked for real: durations
without a unit, a negative delay in both spellings, a series without --id, a series' schedule
in `get` and `get --json`, and `report` without Java."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers.serve_process import TIMERWHEEL

from timerwheel.capacity.java import INSTALL_HINT, java_major_version, java_problem
from timerwheel.cli.main import main
from timerwheel.cli.times import format_ms

# `wallclock` (re-run at the worst moments of an hour by tests/system/test_time_of_day.py)
# marks the tests that store or read timers on the server's real clock; the refusals of a
# command line, and `report` without Java, are the same at any time of day.
wallclock = pytest.mark.wallclock


def _usage_error(argv: list[str], capsys) -> str:
    """stderr of a command line argparse itself refuses (exit 2)."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    return capsys.readouterr().err


# == durations need a unit =================================================================
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("send", "--topic", "t", "--delay", "5"), "--delay='5': give a unit, e.g. 5s or 5ms"),
        (("send", "--topic", "t", "--delay=250"), "--delay='250': give a unit, e.g. 250s or 250ms"),
        (("send", "--topic", "t", "--id", "s", "--every", "90"), "--every='90': give a unit"),
        (("send", "--topic", "t", "--at", "+5"), "--at='+5': give a unit, e.g. +5s or +5m"),
        (("reschedule", "x", "--delay", "5"), "--delay='5': give a unit, e.g. 5s or 5ms"),
    ],
)
def test_a_duration_without_a_unit_is_refused_naming_flag_value_and_fix(cli, args, message):
    code, out, err = cli(*args)
    assert code == 2 and message in err and out == ""


@wallclock
def test_durations_with_units_still_work(cli, client):
    code, _, err = cli("send", "--topic", "units", "--id", "u1", "--delay", "5s")
    assert code == 0, err
    stored = client.get("u1")
    assert stored.deliver_at_ms - stored.created_at_ms == pytest.approx(5_000, abs=50)
    code, _, err = cli("send", "--topic", "units", "--id", "u2", "--delay", "5ms")
    assert code == 0, err


@pytest.mark.system  # a spawned `timerwheel serve`
def test_serve_refuses_an_ack_timeout_without_a_unit(tmp_path):
    done = subprocess.run(
        [TIMERWHEEL, "serve", "--data-dir", str(tmp_path / "d"), "--port", "0",
         "--ack-timeout", "10"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "timerwheel serve: --ack-timeout='10': give a unit, e.g. 10s or 10ms"
    )
    assert not (tmp_path / "d").exists()


# == a negative delay ======================================================================
@wallclock
@pytest.mark.parametrize("spelling", [["--delay", "-5s"], ["--delay=-5s"]])
def test_a_negative_delay_says_so_in_both_spellings(cli, spelling):
    code, out, err = cli("send", "--topic", "t", *spelling)
    assert code == 2 and out == ""
    assert "--delay='-5s': a negative delay" in err and "expected one argument" not in err


@wallclock
def test_reschedule_with_a_negative_delay_says_so(cli):
    code, _, err = cli("reschedule", "some-id", "--delay", "-1m")
    assert code == 2 and "--delay='-1m': a negative delay" in err


@wallclock
def test_a_negative_number_stays_a_value_of_other_flags(cli):
    """The join of `--flag -N` is for every one-value flag: the server names -1."""
    code, _, err = cli("send", "--topic", "t", "--delay", "1s", "--max-attempts", "-1")
    assert code == 1 and "max_attempts=-1" in err


def test_a_flag_after_a_value_taking_flag_is_still_a_flag(capsys):
    """Only a token that looks like a negative number is joined: `--delay --at` is not."""
    err = _usage_error(["send", "--topic", "t", "--delay", "--at", "now"], capsys)
    assert "--delay: expected one argument" in err


# == a series needs --id ===================================================================
@wallclock
@pytest.mark.parametrize(
    ("repeat", "flag"), [(["--cron", "0 5 * * *"], "--cron"), (["--every", "2m"], "--every")]
)
def test_a_series_without_id_is_refused_and_nothing_is_stored(cli, client, repeat, flag):
    code, out, err = cli("send", "--topic", "series", *repeat)
    assert code == 2 and out == ""
    assert f"{flag} needs --id" in err
    assert client.count("series").pending == 0


# == a series in get, get --json ===========================================================
@wallclock
def test_get_shows_a_series_schedule_and_next_occurrence(cli, client):
    code, _, err = cli("send", "--topic", "jobs", "--id", "tick", "--every", "90s",
                       "--max-count", "5", "--missed", "each")  # fmt: skip
    assert code == 0, err
    stored = client.get("tick")  # an --every series fires #1 at once: #2 is next
    number = stored.next_occurrence
    assert number >= 1

    code, out, _ = cli("get", "tick")
    lines = dict(line.split(None, 1) for line in out.splitlines() if line.strip())
    assert code == 0
    assert lines["schedule"] == "every 90s, at most 5 occurrence(s), missed: fire each"
    assert lines["next"] == f"#{number} (tick#{number}) at {format_ms(stored.deliver_at_ms)}"

    code, out, _ = cli("get", "tick", "--json")
    answer = json.loads(out)
    assert answer["repeat"] == {
        "every_ms": 90_000, "cron": "", "time_zone": "", "end_at_ms": 0, "max_count": 5,
        "missed": "each", "catch_up_window_ms": 0, "max_catch_up": 0,
    }  # fmt: skip
    assert answer["next_occurrence"] == {
        "number": number, "message_id": f"tick#{number}", "deliver_at_ms": stored.deliver_at_ms,
    }  # fmt: skip


@wallclock
def test_get_shows_a_cron_series_with_its_zone(cli):
    code, _, err = cli("send", "--topic", "jobs", "--id", "nightly", "--cron", "0 5 * * *",
                       "--tz", "Europe/Paris")  # fmt: skip
    assert code == 0, err
    code, out, _ = cli("get", "nightly")
    assert "schedule      cron '0 5 * * *' in Europe/Paris, missed: fire once" in out
    assert json.loads(cli("get", "nightly", "--json")[1])["repeat"]["time_zone"] == "Europe/Paris"


@wallclock
def test_get_of_a_one_off_timer_has_no_schedule(cli):
    cli("send", "--topic", "jobs", "--id", "once", "--delay", "1h")
    code, out, _ = cli("get", "once")
    assert code == 0 and "schedule" not in out and "next " not in out
    answer = json.loads(cli("get", "once", "--json")[1])
    assert answer["repeat"] is None and answer["next_occurrence"] is None


# == report without Java ===================================================================
def _without_java(**extra: str) -> dict[str, str]:
    """This environment with no java to be found: PATH of the venv only, no JAVA_HOME."""
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = os.path.dirname(sys.executable)
    return {**env, **extra}


@pytest.mark.system  # a spawned `timerwheel report`
@pytest.mark.parametrize(
    ("env", "where"),
    [
        ({}, "no java on PATH and JAVA_HOME is not set"),
        ({"JAVA_HOME": "/nonexistent/jdk"}, "JAVA_HOME=/nonexistent/jdk has no bin/java"),
    ],
)
def test_report_without_java_says_so_in_one_line(tmp_path, env, where):
    done = subprocess.run(
        [TIMERWHEEL, "report", "--input", str(tmp_path / "export"), "--out", str(tmp_path / "r")],
        capture_output=True, text=True, timeout=120, env=_without_java(**env),
    )  # fmt: skip
    assert done.returncode == 1
    assert done.stderr.splitlines() == [f"report failed: {INSTALL_HINT}; {where}"]
    assert "apt-get install openjdk-17-jre-headless" in done.stderr
    assert not (tmp_path / "r").exists()  # refused before anything was written


def test_java_is_found_as_spark_finds_it(tmp_path):
    fake_home = tmp_path / "jdk"
    (fake_home / "bin").mkdir(parents=True)
    java = fake_home / "bin" / "java"
    java.write_text("#!/bin/sh\necho 'openjdk version \"11.0.2\"' >&2\n")
    java.chmod(0o755)
    assert java_major_version(str(java)) == 11
    problem = java_problem({"JAVA_HOME": str(fake_home), "PATH": ""})
    assert problem == f"{INSTALL_HINT}; {java} is Java 11"
    java.write_text("#!/bin/sh\necho 'openjdk version \"17.0.15\"' >&2\n")
    assert java_problem({"JAVA_HOME": str(fake_home), "PATH": ""}) is None
    java.write_text("#!/bin/sh\necho 'java version \"1.8.0_402\"' >&2\n")
    assert java_major_version(str(java)) == 8
    assert java_problem({"PATH": str(fake_home / "bin")}) == f"{INSTALL_HINT}; {java} is Java 8"


# == --timeout carries its unit ===============================================================
@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("5", "--timeout='5': give a unit, e.g. 5s or 5ms"),
        ("0.5", "--timeout='0.5': give a unit, e.g. 0.5s or 0.5ms"),
        ("0s", "--timeout='0s': must be more than 0"),
        ("-1s", "--timeout='-1s': negative"),
    ],
)
def test_a_timeout_without_a_unit_is_refused_naming_flag_value_and_fix(cli, value, message):
    code, out, err = cli("get", "some-id", "--timeout", value)
    assert code == 2 and out == "" and message in err, err


def test_a_timeout_with_its_unit_bounds_the_call(capsys):
    """500ms is half a second, not 500 s: a call to a port that never answers is refused
    UNAVAILABLE within the call's deadline, well before a 10 s default would end it."""
    import socket
    import time

    with socket.socket() as silent:  # bound and listening, never accepting a handshake
        silent.bind(("127.0.0.1", 0))
        silent.listen(0)
        target = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        code = main(["get", "x", "--target", target, "--timeout", "500ms"])
        took = time.monotonic() - started
    err = capsys.readouterr().err
    assert code == 1 and ("DEADLINE_EXCEEDED" in err or "UNAVAILABLE" in err), err
    assert took < 5.0, took  # the default, 10 s, would still be waiting
