"""A timer's trace (`timerwheel get ID --trace`) as lines for people and dicts for scripts;
and a series' schedule and next occurrence, said the same way by `get`, `get --json` and
the console's timer view."""

from __future__ import annotations

from collections.abc import Callable

from timerwheel.durations import format_duration_ms
from timerwheel.v1 import timerwheel_pb2 as pb

_PREFIX = "TRACE_"


def kind_name(kind: int) -> str:
    """SENT, CASCADED, ... (the proto's TraceKind name without its prefix)."""
    return pb.TraceKind.Name(kind).removeprefix(_PREFIX)


def describe_event(
    event: pb.TraceEvent, deliver_at_ms: int, format_ms: Callable[[int], str]
) -> str:
    kind = kind_name(event.kind)
    if kind == "SENT":
        return f"placed in the {event.wheel} wheel" if event.wheel else "due at once: fired"
    if kind == "CASCADED":
        return f"{event.from_wheel} wheel -> {event.wheel} wheel"
    if kind == "FIRED":
        where = f"from the {event.wheel} wheel" if event.wheel else "into its topic"
        return f"{where}, {event.at_ms - deliver_at_ms:+,} ms from its time"
    if kind == "DELIVERED":
        return f"attempt {event.attempt} to {event.subscriber}"
    if kind == "NACKED":
        return f"attempt {event.attempt} failed: {event.detail}"
    if kind == "RESCHEDULED":
        return f"to {format_ms(event.deliver_at_ms)}, into the {event.wheel or 'no'} wheel"
    if kind == "DEAD_LETTERED":
        return f"to {event.detail}"
    if kind == "REDRIVEN":
        return f"back to {event.detail}"
    if kind == "REPLACED":
        return f"a new version, due {format_ms(event.deliver_at_ms)}"
    if kind == "PAUSED":
        return "occurrences skipped until resumed"
    return ""


def trace_lines(message: pb.TimerMessage, format_ms: Callable[[int], str]) -> list[str]:
    """One line per event: time, kind, what happened."""
    return [
        f"{format_ms(e.at_ms):<26}{kind_name(e.kind):<15}"
        f"{describe_event(e, message.deliver_at_ms, format_ms)}".rstrip()
        for e in message.trace
    ]


def trace_dicts(message: pb.TimerMessage) -> list[dict]:
    """The events for `--json`: every field, kind by name, plain ints."""
    return [
        {
            "kind": kind_name(e.kind), "at_ms": e.at_ms, "wheel": e.wheel,
            "from_wheel": e.from_wheel, "attempt": e.attempt, "subscriber": e.subscriber,
            "detail": e.detail, "deliver_at_ms": e.deliver_at_ms,
        }
        for e in message.trace
    ]  # fmt: skip


def is_series(message: pb.TimerMessage) -> bool:
    """A stored series (`send --every` / `--cron`): the API sets `repeat` while it runs."""
    return bool(message.repeat.every_ms or message.repeat.cron)


def schedule_text(repeat: pb.Repeat, format_ms: Callable[[int], str]) -> str:
    """`every 5m` or `cron '0 5 * * *' in Europe/Paris`, then its end and missed policy."""
    if repeat.every_ms:
        parts = [f"every {format_duration_ms(repeat.every_ms)}"]
    else:
        parts = [f"cron {repeat.cron!r} in {repeat.time_zone or 'UTC'}"]
    if repeat.end_at_ms:
        parts.append(f"until {format_ms(repeat.end_at_ms)}")
    if repeat.max_count:
        parts.append(f"at most {repeat.max_count} occurrence(s)")
    parts.append(f"missed: fire {_missed(repeat)}")
    if repeat.max_catch_up:
        parts[-1] += f" (at most {repeat.max_catch_up})"
    if repeat.catch_up_window_ms:
        parts.append(f"within {format_duration_ms(repeat.catch_up_window_ms)}")
    return ", ".join(parts)


def next_occurrence_text(message: pb.TimerMessage, format_ms: Callable[[int], str]) -> str:
    """`#3 (nightly#3) at <UTC ISO 8601 time>`: its number, the id it fires as, when;
    a paused series says so (the time is when it would be)."""
    number = message.next_occurrence
    occurrence_id = f"{message.message_id}#{number}"
    text = f"#{number} ({occurrence_id}) at {format_ms(message.deliver_at_ms)}"
    return text + " (paused: skipped until resumed)" if message.paused else text


def schedule_dict(message: pb.TimerMessage) -> dict:
    """`repeat`, `paused` and `next_occurrence` for scripts (None when not a series)."""
    if not is_series(message):
        return {"repeat": None, "paused": None, "next_occurrence": None}
    repeat = message.repeat
    return {
        "repeat": {
            "every_ms": repeat.every_ms, "cron": repeat.cron,
            "time_zone": repeat.time_zone or ("UTC" if repeat.cron else ""),
            "end_at_ms": repeat.end_at_ms, "max_count": repeat.max_count,
            "missed": _missed(repeat), "catch_up_window_ms": repeat.catch_up_window_ms,
            "max_catch_up": repeat.max_catch_up,
        },
        "paused": message.paused,
        "next_occurrence": {
            "number": message.next_occurrence,
            "message_id": f"{message.message_id}#{message.next_occurrence}",
            "deliver_at_ms": message.deliver_at_ms,
        },
    }  # fmt: skip


def _missed(repeat: pb.Repeat) -> str:
    return "each" if repeat.missed == pb.MISSED_FIRE_EACH else "once"
