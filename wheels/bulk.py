"""Bulk cancel, purge and redrive: which messages a filter selects, and what a call did.

Pure: no I/O. The engine scans the store for candidates (`timerwheel.store.bulk`), and
the writer checks each one against the filter again when it applies the change
(`timerwheel.engine.bulk_ops`), so a message that changed in between is left alone.

- **Cancel** (`BulkCancel`): the SCHEDULED timers selected become CANCELLED, as
  `Cancel` does one by one (a series is stopped).
- **Purge**: cancel, and also the FIRED messages not yet acked that are selected: their
  `ready` entry goes and they become CANCELLED, so no consumer gets them again. A dead
  letter is such a message on its dead-letter topic, so purging that topic (or its ids)
  removes dead letters. ACKED and CANCELLED records are left to the retention sweep.
- **Redrive**: a dead letter (FIRED on a dead-letter topic, with the property
  `timerwheel.dead_letter.topic`) fires again on that topic, with its attempts from 1.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from timerwheel.wheels.domain import InvalidArgument
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import validate_message_ref, validate_topic

BULK_LIMIT_DEFAULT = 1_000
BULK_LIMIT_MAX = 10_000
# Keys one call examines at most, so a filter that matches little cannot pin the server:
# the call then answers with what it did so far and a page token (`more`).
BULK_SCAN_BUDGET = 100_000
SERIES_SEPARATOR = "#"  # occurrence n of series S is "S#n"
DEAD_LETTER_PREFIX = "timerwheel.dead_letter."  # properties a dead letter carries
DEAD_LETTER_ORIGIN = DEAD_LETTER_PREFIX + "topic"


@dataclass(frozen=True)
class TimerFilter:
    """Every field given must match; `to_ms` 0: no upper bound."""

    topic: str = ""
    series_id: str = ""
    id_prefix: str = ""
    from_ms: int = 0
    to_ms: int = 0

    @property
    def empty(self) -> bool:
        return not (self.topic or self.series_id or self.id_prefix or self.from_ms or self.to_ms)

    def matches(self, message_id: str, topic: str, deliver_at_ms: int) -> bool:
        """Whether a message of `topic` due at `deliver_at_ms` is selected (for Redrive,
        `topic` is the one it came from)."""
        if self.topic and topic != self.topic:
            return False
        if self.series_id and not (
            message_id == self.series_id or message_id.startswith(self.series_id + SERIES_SEPARATOR)
        ):
            return False
        if self.id_prefix and not message_id.startswith(self.id_prefix):
            return False
        if deliver_at_ms < self.from_ms:
            return False
        return not (self.to_ms and deliver_at_ms >= self.to_ms)


@dataclass(frozen=True)
class BulkResult:
    """What one bulk call did. `fired`: per topic, the FIRED messages it purged (the
    delivery side stops tracking them); `next_token` empty when nothing remains."""

    cancelled: int = 0
    purged: int = 0
    next_token: str = ""
    fired: dict[str, list[str]] = field(default_factory=dict)
    cancelled_ids: list[str] = field(default_factory=list)  # the SCHEDULED ones cancelled


@dataclass(frozen=True)
class RedriveResult:
    """What one redrive call did: the ids moved off the dead-letter topic."""

    moved: list[str] = field(default_factory=list)
    next_token: str = ""


def validate_filter(
    timer_filter: TimerFilter, settings: Settings, *, required: bool, prefix: str = "filter."
) -> TimerFilter:
    """Refuse a filter naming a bad value (InvalidArgument names the field, e.g.
    `filter.topic`), and an empty one when `required` (a bulk cancel or purge of
    everything must say so field by field)."""
    f = timer_filter
    if required and f.empty:
        raise InvalidArgument(
            prefix.rstrip("."), "{}",
            "select something: give topic, series_id, id_prefix or a time range "
            "(from_ms, to_ms)",
        )  # fmt: skip
    if f.topic:
        validate_topic(f.topic, settings, prefix + "topic")
    if f.series_id:
        validate_message_ref(f.series_id, prefix + "series_id")
        if SERIES_SEPARATOR in f.series_id:
            raise InvalidArgument(
                prefix + "series_id", f.series_id, "is an occurrence id; give the series' id"
            )
    if f.id_prefix:
        validate_message_ref(f.id_prefix, prefix + "id_prefix")
    if f.from_ms < 0:
        raise InvalidArgument(prefix + "from_ms", f.from_ms, "must not be negative")
    if f.to_ms < 0 or (f.to_ms and f.to_ms <= f.from_ms):
        raise InvalidArgument(
            prefix + "to_ms", f.to_ms, f"must be greater than from_ms ({f.from_ms}), or 0: no bound"
        )
    return f


def validate_limit(limit: int, field_name: str = "limit") -> int:
    """The changes one call makes at most: `limit`, or the default for 0."""
    if not 0 <= limit <= BULK_LIMIT_MAX:
        raise InvalidArgument(
            field_name, limit, f"must be 0..{BULK_LIMIT_MAX:,} (0: {BULK_LIMIT_DEFAULT:,})"
        )
    return limit or BULK_LIMIT_DEFAULT
