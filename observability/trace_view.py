"""A timer's trace (`timerwheel get ID --trace`) as lines for people and dicts for scripts."""

from __future__ import annotations

from collections.abc import Callable

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
    if kind == "REPLACED":
        return f"a new version, due {format_ms(event.deliver_at_ms)}"
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
