"""Settings from an optional TOML file, the environment and flags, validated once.

Precedence, lowest first: the defaults in `timerwheel.wheels.settings.Settings`, the TOML file
(`--config FILE` or `TIMERWHEEL_CONFIG`), environment variables `TIMERWHEEL_<FIELD>`
(e.g. `TIMERWHEEL_ACK_TIMEOUT_MS=5s`), then flags. Keys are the `Settings` field names.

Values are converted by the field's type. Every `*_ms` field takes a duration with its unit
(`250ms`, `90s`, `5m`, `2h`, `3d`); a bare number as text (`TIMERWHEEL_ACK_TIMEOUT_MS=10`,
`--ack-timeout 10`, `--set ack_timeout_ms=10`, `ack_timeout_ms = "10"`) is refused, since it
could mean seconds as well as milliseconds. A TOML *integer* for a `*_ms` key is taken as
milliseconds: TOML keeps numbers and strings apart, and the key's own name says the unit
(`ack_timeout_ms = 10000`). `delay_levels_ms` takes a TOML list (integers are ms, strings
need a unit) or a string like "1s 5s 10s". `topics` is a table of per-topic tables
(`[topics."orders".retry]`, timerwheel.wheels.topic_policy); from the environment or
`--set`, that table as TOML text. An unknown key in the file, or a value that does not
convert, is an error naming the source, the key and the value; the combined result is
validated once by `Settings` itself. Environment variables that are not settings are left alone.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping

from timerwheel.durations import parse_duration_ms
from timerwheel.wheels.settings import Settings, SettingsError
from timerwheel.wheels.topic_policy import topics_from_value

ENV_PREFIX = "TIMERWHEEL_"
CONFIG_ENV = "TIMERWHEEL_CONFIG"

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}
_FIELD_TYPES = {f.name: f.type for f in dataclasses.fields(Settings)}
_SIGNED_MS = {"clock_offset_ms"}  # a shift of the clock goes either way: `-5s` is meant


def load_settings(
    config_file: str | None = None,
    env: Mapping[str, str] | None = None,
    overrides: Mapping[str, object] | None = None,
    flags: Mapping[str, str] | None = None,
) -> Settings:
    """Merge file < environment < `overrides` (flags) into one validated Settings.

    `flags` names the flag each override came from (`ack_timeout_ms` -> `--ack-timeout`), so
    an error names what the person typed; without it, `--ack-timeout-ms` style is assumed.
    """
    flags = flags or {}
    env = os.environ if env is None else env
    values: dict[str, object] = {}
    config_file = config_file or env.get(CONFIG_ENV)
    if config_file:
        values.update(_from_toml(config_file))
    for name in _FIELD_TYPES:
        raw = env.get(ENV_PREFIX + name.upper())
        if raw is not None:
            values[name] = convert(name, raw, ENV_PREFIX + name.upper())
    for name, value in (overrides or {}).items():
        if value is not None:
            flag = flags.get(name) or "--" + name.replace("_", "-")
            values[name] = convert(name, value, flag)
    return Settings(**values)


def parse_assignment(text: str) -> tuple[str, object]:
    """`--set NAME=VALUE` -> (name, converted value)."""
    name, sep, value = text.partition("=")
    name = name.strip().replace("-", "_")
    if not sep:
        raise SettingsError(f"--set {text!r}: expected NAME=VALUE")
    return name, convert(name, value, f"--set {name}")


def convert(name: str, value: object, source: str) -> object:
    """`value` (from TOML, an env var or a flag) as the type of Settings field `name`.

    `source` starts every error message: `config file 'x.toml'`, `TIMERWHEEL_PORT`,
    `--set port` or, for a flag, the flag itself (`--ack-timeout`). A duration error from a
    flag or `--set` reads as typed: `--ack-timeout='10': give a unit, e.g. 10s or 10ms`.
    """
    field_type = _FIELD_TYPES.get(name)
    if field_type is None:
        raise SettingsError(f"{source}: unknown setting {name!r}; known: {', '.join(_FIELD_TYPES)}")
    if name == "topics":  # a table of tables (timerwheel.wheels.topic_policy)
        try:
            return topics_from_value(value)
        except ValueError as exc:
            raise SettingsError(f"{source}: {exc}") from exc
    if name.endswith("_ms") and isinstance(value, str) and field_type == "int":
        is_flag = source.startswith("--")  # `--ack-timeout` or `--set ack_timeout_ms`
        try:
            if name in _SIGNED_MS and value.strip().startswith("-"):
                return -parse_duration_ms(value.strip()[1:], source if is_flag else name)
            return parse_duration_ms(value, source if is_flag else name)
        except ValueError as exc:
            raise SettingsError(str(exc) if is_flag else f"{source}: {exc}") from exc
    try:
        if field_type == "bool":
            return _to_bool(value)
        if field_type == "int":
            return _to_int(name, value)
        if field_type == "float":
            if isinstance(value, bool) or not isinstance(value, int | float | str):
                raise ValueError("expected a number")
            return float(value)
        if field_type == "str":
            if not isinstance(value, str):
                raise ValueError("expected a string")
            return value
        if field_type.startswith("tuple[int"):
            items = value.replace(",", " ").split() if isinstance(value, str) else value
            if not isinstance(items, list | tuple):
                raise ValueError("expected a list")
            return tuple(_to_int(name, item) for item in items)
    except (ValueError, TypeError) as exc:
        raise SettingsError(f"{source}: {name}={value!r}: {exc}") from exc
    raise SettingsError(f"{source}: {name} has type {field_type}, which cannot be loaded")


def _to_int(name: str, value: object) -> int:
    if isinstance(value, bool):
        raise ValueError("expected an integer, not a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        if name.endswith("_ms"):
            return parse_duration_ms(value, name)
        return int(value.strip())
    raise ValueError("expected an integer")


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("expected true or false")


def _from_toml(path: str) -> dict[str, object]:
    try:
        with open(path, "rb") as file:
            document = tomllib.load(file)
    except OSError as exc:
        raise SettingsError(f"config file {path!r}: cannot read it: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise SettingsError(f"config file {path!r}: not valid TOML: {exc}") from exc
    return {name: convert(name, value, f"config file {path!r}") for name, value in document.items()}
