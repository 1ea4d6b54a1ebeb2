"""Per-topic delivery defaults: a topic's retry policy and attempt limit.

A message's delivery options come, first match wins, from its own send
(`SendRequest.retry`, `SendRequest.max_attempts`), from its topic's table in the settings
(`Settings.topics`), then from the server's `retry_*` and `max_attempts` settings. A
topic's table names only what differs: every retry field it leaves out is the server's,
so raising `retry_initial_ms` server-wide still reaches a topic that only set its cap.

In the TOML file::

    [topics."orders"]
    max_attempts = 5            # 0: unlimited
    [topics."orders".retry]
    backoff = "fixed"           # or "exponential"
    initial_ms = "2s"           # durations carry their unit; a TOML integer is ms
    max_ms = "10m"
    multiplier = 3.0
    jitter_percent = 10

The retry keys are the proto's `RetryPolicy` field names (`kind` is `backoff` here, as
in `retry_backoff`). `TIMERWHEEL_TOPICS` or `--set topics=...` take the same table as
TOML text (`orders = {max_attempts = 5, retry = {initial_ms = "2s"}}`). Pure: this
module converts and checks; `Settings` raises what it finds, naming the value.
"""

from __future__ import annotations

import dataclasses
import re
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from timerwheel.durations import parse_duration_ms
from timerwheel.wheels.retry import RetryKind, RetryPolicy, check_policy

if TYPE_CHECKING:
    from timerwheel.wheels.settings import Settings

# The topic alphabet of timerwheel.wheels.validation (which imports the settings, so it
# cannot be imported by them).
_TOPIC_RE = re.compile(r"[A-Za-z0-9_.%|-]+")
_BACKOFFS = {"exponential": RetryKind.EXPONENTIAL, "fixed": RetryKind.FIXED}
_RETRY_KEYS = ("backoff", "initial_ms", "max_ms", "multiplier", "jitter_percent")
_TOPIC_KEYS = ("max_attempts", "retry")


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """One topic's defaults; None: the server's setting of the same name."""

    topic: str
    max_attempts: int | None = None
    backoff: str | None = None
    initial_ms: int | None = None
    max_ms: int | None = None
    multiplier: float | None = None
    jitter_percent: int | None = None


def topics_from_value(value: object) -> tuple[TopicSettings, ...]:
    """A `topics` setting as the TOML file, an env var or `--set` gives it: a table of
    tables, or that table as TOML text. ValueError names the key and the value."""
    if isinstance(value, str):
        try:
            value = tomllib.loads(value)
        except tomllib.TOMLDecodeError as exc:
            raise ValueError(f"topics={value!r}: not a TOML table: {exc}") from exc
    if isinstance(value, tuple) and all(isinstance(t, TopicSettings) for t in value):
        return value
    if not isinstance(value, Mapping):
        raise ValueError(f"topics={value!r}: expected a table of topics")
    return tuple(_topic(str(name), table) for name, table in value.items())


def _topic(name: str, table: object) -> TopicSettings:
    where = f"topics.{_quoted(name)}"
    if not isinstance(table, Mapping):
        raise ValueError(f"{where}={table!r}: expected a table (max_attempts, retry)")
    _known_keys(where, table, _TOPIC_KEYS)
    fields: dict[str, object] = {"topic": name}
    if "max_attempts" in table:
        fields["max_attempts"] = _integer(f"{where}.max_attempts", table["max_attempts"])
    retry = table.get("retry", {})
    if not isinstance(retry, Mapping):
        raise ValueError(f"{where}.retry={retry!r}: expected a table ({', '.join(_RETRY_KEYS)})")
    _known_keys(f"{where}.retry", retry, _RETRY_KEYS)
    for key, raw in retry.items():
        path = f"{where}.retry.{key}"
        if key.endswith("_ms"):
            fields[key] = _duration_ms(path, raw)
        elif key == "multiplier":
            if isinstance(raw, bool) or not isinstance(raw, int | float):
                raise ValueError(f"{path}={raw!r}: expected a number")
            fields[key] = float(raw)
        elif key == "backoff":
            if raw not in _BACKOFFS:
                raise ValueError(f"{path}={raw!r}: must be 'exponential' or 'fixed'")
            fields[key] = raw
        else:
            fields[key] = _integer(path, raw)
    return TopicSettings(**fields)  # type: ignore[arg-type]


def _known_keys(where: str, table: Mapping, known: tuple[str, ...]) -> None:
    for key in table:
        if key not in known:
            raise ValueError(f"{where}: unknown key {key!r}; known: {', '.join(known)}")


def _integer(path: str, raw: object) -> int:
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ValueError(f"{path}={raw!r}: expected an integer")
    return raw


def _duration_ms(path: str, raw: object) -> int:
    """A TOML integer is ms (the key says the unit); text needs its unit."""
    if isinstance(raw, str):
        return parse_duration_ms(raw, path)
    return _integer(path, raw)


def _quoted(topic: str) -> str:
    return f'"{topic}"'


def topic_policy(topic: TopicSettings, server: RetryPolicy) -> RetryPolicy | None:
    """The topic's retry policy, its unset fields the server's; None when it sets none."""
    changes: dict[str, object] = {}
    if topic.backoff is not None:
        changes["kind"] = _BACKOFFS[topic.backoff]
    for key in _RETRY_KEYS[1:]:
        value = getattr(topic, key)
        if value is not None:
            changes[key] = value
    return dataclasses.replace(server, **changes) if changes else None  # type: ignore[arg-type]


def topics_problem(settings: Settings) -> str | None:
    """What is wrong with `settings.topics`, naming the key and the value, or None."""
    seen: set[str] = set()
    server = settings.retry_policy()
    for topic in settings.topics:
        if not isinstance(topic, TopicSettings):
            return f"topics={settings.topics!r}: expected TopicSettings"
        where = f"topics.{_quoted(topic.topic)}"
        if topic.topic in seen:
            return f"{where}: given twice"
        seen.add(topic.topic)
        if len(topic.topic) > settings.max_topic_len:
            most = settings.max_topic_len
            return f"{where}: the topic is {len(topic.topic)} characters; at most {most}"
        if not _TOPIC_RE.fullmatch(topic.topic):
            return f"{where}: a topic may hold only letters, digits and _ . % | -"
        limit = topic.max_attempts
        if limit is not None and (type(limit) is not int or limit < 0):
            return f"{where}.max_attempts={limit!r}: must be 0 (unlimited) or more"
        policy = topic_policy(topic, server)
        problem = check_policy(policy) if policy is not None else None
        if problem is not None:
            field, value, why = problem
            return f"{where}.retry.{field}={value!r}: {why}"
    return None


def by_topic(settings: Settings) -> dict[str, tuple[int, RetryPolicy | None]]:
    """{topic: (attempt limit, retry policy or None for the server's)} of the topics
    that have a table; every other topic has the server's."""
    server = settings.retry_policy()
    return {
        t.topic: (
            settings.max_attempts if t.max_attempts is None else t.max_attempts,
            topic_policy(t, server),
        )
        for t in settings.topics
    }
