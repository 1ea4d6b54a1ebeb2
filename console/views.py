"""The console's JSON: API answers (protos) as plain dicts, times readable by people.

Every time is given three ways, `{"ms": ..., "iso": "YYYY-MM-DDThh:mm:ss.mmmZ",
"relative": "in 3m 20s"}`, relative to the server's clock at the moment of the answer, so
the page shows nothing it would have to compute or could get wrong about time zones.
A time the API leaves 0 (not fired yet, never acked) is `null`.
"""

from __future__ import annotations

from datetime import UTC, datetime

from timerwheel.observability.trace_view import (
    describe_event,
    is_series,
    kind_name,
    next_occurrence_text,
    schedule_dict,
    schedule_text,
)
from timerwheel.v1 import timerwheel_pb2 as pb

BODY_PREVIEW_BYTES = 4096
_UNITS = (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000))


def iso_ms(epoch_ms: int) -> str:
    """ISO 8601 in UTC with milliseconds: YYYY-MM-DDThh:mm:ss.mmmZ (`Z` for UTC)."""
    moment = datetime.fromtimestamp(epoch_ms / 1000, UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def relative(delta_ms: int) -> str:
    """`in 3m 20s` for a time ahead, `3m 20s ago` behind (two units at most)."""
    size = abs(delta_ms)
    if size < 1000:
        text = f"{size} ms"
    else:
        first = next(i for i, (_, unit_ms) in enumerate(_UNITS) if size >= unit_ms)
        parts = []
        for unit, unit_ms in _UNITS[first : first + 2]:
            count, size = divmod(size, unit_ms)
            if count:
                parts.append(f"{count}{unit}")
        text = " ".join(parts)
    return f"in {text}" if delta_ms > 0 else f"{text} ago" if delta_ms < 0 else "now"


def moment(epoch_ms: int, now_ms: int) -> dict | None:
    if not epoch_ms:
        return None
    return {"ms": epoch_ms, "iso": iso_ms(epoch_ms), "relative": relative(epoch_ms - now_ms)}


def state_name(state: int) -> str:
    return pb.State.Name(state)


def timer_json(message: pb.TimerMessage, now_ms: int) -> dict:
    """A timer's fields for the page (the body as text, its first BODY_PREVIEW_BYTES)."""
    body = message.body[:BODY_PREVIEW_BYTES]
    return {
        "message_id": message.message_id,
        "topic": message.topic,
        "state": state_name(message.state),
        "wheel": message.wheel,
        "deliver_at": moment(message.deliver_at_ms, now_ms),
        "created_at": moment(message.created_at_ms, now_ms),
        "fired_at": moment(message.fired_at_ms, now_ms),
        "acked_at": moment(message.acked_at_ms, now_ms),
        "cancelled_at": moment(message.cancelled_at_ms, now_ms),
        "attempts": message.attempts,
        "properties": dict(sorted(message.properties.items())),
        "body_bytes": len(message.body),
        "body_preview": body.decode("utf-8", errors="replace"),
        "trace": [trace_event_json(e, message.deliver_at_ms, now_ms) for e in message.trace],
        **series_json(message, now_ms),
    }


def series_json(message: pb.TimerMessage, now_ms: int) -> dict:
    """A series' schedule and next occurrence: the fields of `timerwheel get --json`, plus
    each said in words for the page (`schedule`, `next`); all None when not a series."""
    out: dict = {**schedule_dict(message), "schedule": None, "next": None}
    if is_series(message):
        out["schedule"] = schedule_text(message.repeat, iso_ms)
        out["next"] = next_occurrence_text(message, iso_ms)
        out["next_occurrence"]["at"] = moment(message.deliver_at_ms, now_ms)
    return out


def trace_event_json(event: pb.TraceEvent, deliver_at_ms: int, now_ms: int) -> dict:
    """One trace event: its kind by name, when, and what happened in words (as the CLI's
    `timerwheel get ID --trace` says it), with the raw fields too."""
    return {
        "kind": kind_name(event.kind),
        "at": moment(event.at_ms, now_ms),
        "what": describe_event(event, deliver_at_ms, iso_ms),
        "wheel": event.wheel,
        "from_wheel": event.from_wheel,
        "attempt": event.attempt,
        "subscriber": event.subscriber,
        "detail": event.detail,
        "deliver_at": moment(event.deliver_at_ms, now_ms),
    }


def pending_row_json(message: pb.TimerMessage, now_ms: int) -> dict:
    """A timer in the topic listing: what a row shows."""
    return {
        "message_id": message.message_id,
        "state": state_name(message.state),
        "deliver_at": moment(message.deliver_at_ms, now_ms),
        "created_at": moment(message.created_at_ms, now_ms),
        "wheel": message.wheel,
        "properties": dict(sorted(message.properties.items())),
    }
