"""timerwheel.cli.config: durations, precedence (defaults < TOML < env < flags), clear errors;
and `timerwheel serve`'s flags feeding it."""

from __future__ import annotations

import argparse

import pytest

from timerwheel.cli.commands import serve
from timerwheel.cli.config import load_settings, parse_assignment
from timerwheel.durations import parse_duration_ms
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings, SettingsError


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("90s", 90_000), ("5m", 5 * MINUTE_MS), ("2h", 2 * HOUR_MS), ("3d", 3 * DAY_MS),
        ("250ms", 250), ("1500ms", 1_500), ("0s", 0), (" 1.5s ", 1_500), ("10S", 10_000),
    ],
)  # fmt: skip
def test_durations(text, ms):
    assert parse_duration_ms(text) == ms


@pytest.mark.parametrize(
    ("text", "reason"),
    [("-5s", "negative"), ("5 minutes", "not a duration"), ("", "not a duration"),
     ("1.5ms", "whole number"), ("s", "not a duration"), ("5w", "not a duration"),
     ("5", "give a unit, e.g. 5s or 5ms"), ("1.5", "give a unit, e.g. 1.5s or 1.5ms")],
)  # fmt: skip
def test_bad_durations_name_the_value(text, reason):
    with pytest.raises(ValueError, match=reason) as info:
        parse_duration_ms(text, "--delay")
    assert str(info.value).startswith(f"--delay={text!r}: ")


def test_a_bare_number_names_the_flag_the_value_and_the_fix():
    with pytest.raises(ValueError) as info:
        parse_duration_ms("5", "--delay")
    assert str(info.value) == "--delay='5': give a unit, e.g. 5s or 5ms"


def test_defaults_without_any_source():
    assert load_settings(env={}) == Settings()


def test_precedence_file_then_env_then_flags(tmp_path):
    config = tmp_path / "tw.toml"
    config.write_text(
        'data_dir = "/from/file"\nport = 1111\nack_timeout_ms = "10s"\nmax_unacked = 5\n'
        'sync_writes = false\ndelay_levels_ms = [1000, "2s"]\n'
    )
    env = {"TIMERWHEEL_PORT": "2222", "TIMERWHEEL_ACK_TIMEOUT_MS": "20s", "UNRELATED": "x"}
    settings = load_settings(str(config), env=env, overrides={"ack_timeout_ms": "30000ms"})
    assert settings.data_dir == "/from/file"  # file only
    assert settings.port == 2222  # env over file
    assert settings.ack_timeout_ms == 30_000  # flag over env
    assert settings.max_unacked == 5 and settings.sync_writes is False
    assert settings.delay_levels_ms == (1000, 2000)


def test_config_file_from_environment(tmp_path):
    config = tmp_path / "tw.toml"
    config.write_text("max_in_flight_default = 7\n")
    assert load_settings(env={"TIMERWHEEL_CONFIG": str(config)}).max_in_flight_default == 7


def test_env_values_are_converted_by_type():
    env = {
        "TIMERWHEEL_SYNC_WRITES": "off",
        "TIMERWHEEL_RETENTION_MS": "2d",
        "TIMERWHEEL_DELAY_LEVELS_MS": "1s 5s, 1m",
        "TIMERWHEEL_MAX_SUBSCRIBERS": "8",
    }
    settings = load_settings(env=env)
    assert settings.sync_writes is False and settings.retention_ms == 2 * DAY_MS
    assert settings.delay_levels_ms == (1_000, 5_000, MINUTE_MS)
    assert settings.max_subscribers == 8


@pytest.mark.parametrize(
    ("toml", "env", "fragments"),
    [
        ("nonsense = 1\n", {}, ["config file", "unknown setting 'nonsense'"]),
        ("port = 'x'\n", {}, ["config file", "port='x'"]),
        ("port = [\n", {}, ["not valid TOML"]),
        ("", {"TIMERWHEEL_PORT": "seven"}, ["TIMERWHEEL_PORT", "port='seven'"]),
        ("", {"TIMERWHEEL_SYNC_WRITES": "maybe"}, ["TIMERWHEEL_SYNC_WRITES", "true or false"]),
        ("", {"TIMERWHEEL_ACK_TIMEOUT_MS": "-1s"}, ["ack_timeout_ms='-1s'", "negative"]),
        (
            "",
            {"TIMERWHEEL_ACK_TIMEOUT_MS": "10"},
            ["TIMERWHEEL_ACK_TIMEOUT_MS: ack_timeout_ms='10': give a unit, e.g. 10s or 10ms"],
        ),
        ("ack_timeout_ms = '10'\n", {}, ["config file", "ack_timeout_ms='10': give a unit"]),
        ("delay_levels_ms = '1 5s'\n", {}, ["config file", "delay_levels_ms='1': give a unit"]),
        (
            "",
            {"TIMERWHEEL_DELAY_LEVELS_MS": "1000 2000"},
            ["TIMERWHEEL_DELAY_LEVELS_MS", "give a unit"],
        ),
        ("", {"TIMERWHEEL_PORT": "70000"}, ["port=70000", "0..65535"]),  # Settings validates
        ("ack_timeout_ms = 0\n", {}, ["ack_timeout_ms=0", "positive"]),
        ("max_request_bytes = 1024\n", {}, ["max_request_bytes=1024"]),
        ("max_in_flight_default = 200000\n", {}, ["max_in_flight_default=200000"]),
    ],
)
def test_bad_settings_are_refused_naming_source_key_and_value(tmp_path, toml, env, fragments):
    config = tmp_path / "tw.toml"
    config.write_text(toml)
    with pytest.raises(SettingsError) as info:
        load_settings(str(config), env=env)
    for fragment in fragments:
        assert fragment in str(info.value)


def test_missing_config_file_is_a_clear_error(tmp_path):
    with pytest.raises(SettingsError, match="cannot read it"):
        load_settings(str(tmp_path / "absent.toml"), env={})


def test_toml_integers_of_ms_settings_are_milliseconds(tmp_path):
    """The documented exception: TOML keeps numbers and strings apart, and the key's name
    says the unit, so `ack_timeout_ms = 10000` is 10 s; `"10000"` (a string) is refused."""
    config = tmp_path / "tw.toml"
    config.write_text("ack_timeout_ms = 10000\ndelay_levels_ms = [1000, '5s']\n")
    settings = load_settings(str(config), env={})
    assert settings.ack_timeout_ms == 10_000 and settings.delay_levels_ms == (1_000, 5_000)


def test_the_clock_offset_may_be_negative_but_needs_its_unit():
    assert load_settings(env={"TIMERWHEEL_CLOCK_OFFSET_MS": "-5s"}).clock_offset_ms == -5_000
    assert load_settings(env={"TIMERWHEEL_CLOCK_OFFSET_MS": "250ms"}).clock_offset_ms == 250
    with pytest.raises(SettingsError, match="clock_offset_ms='5': give a unit"):
        load_settings(env={"TIMERWHEEL_CLOCK_OFFSET_MS": "-5"})


def test_set_assignments():
    assert parse_assignment("delivery-batch-max=1000") == ("delivery_batch_max", 1000)
    assert parse_assignment("ack_timeout_ms=2s") == ("ack_timeout_ms", 2_000)
    with pytest.raises(SettingsError) as info:
        parse_assignment("ack_timeout_ms=5000")
    assert str(info.value) == "--set ack_timeout_ms='5000': give a unit, e.g. 5000s or 5000ms"
    with pytest.raises(SettingsError, match="NAME=VALUE"):
        parse_assignment("port")
    with pytest.raises(SettingsError, match="unknown setting 'nope'"):
        parse_assignment("nope=1")


def _serve_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    serve.register(parser.add_subparsers())
    return parser.parse_args(["serve", *argv])


def test_serve_flags_become_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("TIMERWHEEL_MAX_UNACKED", "99")
    monkeypatch.setenv("TIMERWHEEL_PORT", "1234")
    args = _serve_args(
        "--data-dir", str(tmp_path), "--port", "0", "--ack-timeout", "5s", "--no-sync",
        "--max-delay", "30d", "--set", "delivery_batch_max=64",
    )  # fmt: skip
    settings = serve.settings_from_args(args)
    assert settings.data_dir == str(tmp_path) and settings.port == 0  # flag over env
    assert settings.ack_timeout_ms == 5_000 and settings.sync_writes is False
    assert settings.max_delay_ms == 30 * DAY_MS and settings.delivery_batch_max == 64
    assert settings.max_unacked == 99  # from the environment
    assert settings.host == "127.0.0.1"  # default


def test_serve_process_flags(tmp_path):
    settings = serve.settings_from_args(_serve_args("--workers", "3"))
    assert settings.workers == 3
    assert serve.settings_from_args(_serve_args()).workers == 0  # one process


@pytest.mark.parametrize(
    ("flag", "value"), [("--ack-timeout", "10"), ("--max-delay", "30"), ("--retention", "3")]
)
def test_serve_refuses_a_duration_flag_without_a_unit(tmp_path, capsys, flag, value):
    args = _serve_args("--data-dir", str(tmp_path / "d"), flag, value)
    assert serve.run(args) == 2
    err = capsys.readouterr().err
    assert f"timerwheel serve: {flag}={value!r}: give a unit, e.g. {value}s or {value}ms" in err
    assert not (tmp_path / "d").exists()  # refused before anything was opened


def test_serve_refuses_bad_settings_before_starting(tmp_path, capsys):
    args = _serve_args("--data-dir", str(tmp_path / "d"), "--port", "99999")
    assert serve.run(args) == 2
    assert "port=99999" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()  # nothing was opened


def test_serve_admission_flags(tmp_path, capsys):
    settings = serve.settings_from_args(
        _serve_args("--admit-fire-lag", "50ms", "--admit-due-load", "70")
    )
    assert (settings.admit_fire_lag_ms, settings.admit_due_load_pct) == (50, 70)
    assert serve.settings_from_args(_serve_args("--admit-due-load", "0")).admit_due_load_pct == 0
    args = _serve_args("--data-dir", str(tmp_path / "d"), "--port", "0", "--admit-due-load", "1001")
    assert serve.run(args) == 2
    assert "admit_due_load_pct=1001" in capsys.readouterr().err
    assert not (tmp_path / "d").exists()
