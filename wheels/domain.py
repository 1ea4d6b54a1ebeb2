"""Domain types and errors shared by every layer (the server maps errors to status codes).

`State`, `SendResult` and `TimerwheelError` are the public vocabulary the client speaks too,
so they are defined in `timerwheel.common` (which imports nothing of the server) and used
from there; the rest of the domain builds on them here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntEnum
from types import MappingProxyType
from typing import NamedTuple

from timerwheel.common import State, TimerwheelError
from timerwheel.wheels.retry import RetryPolicy
from timerwheel.wheels.trace import TraceEvent


class WhenKind(IntEnum):
    """How the producer said when: kept so an idempotent resend can be compared exactly."""

    DELIVER_AT = 1  # absolute epoch ms (RocketMQ 5 setDeliverTimeMs)
    DELAY = 2  # relative ms (RocketMQ 5 setDelayTimeMs)
    LEVEL = 3  # RocketMQ 4 delay level


class IfExists(IntEnum):
    """What a send with a client-chosen id does when that id is taken; values equal the
    proto enum `timerwheel.v1.IfExists`."""

    REJECT = 0  # a retry of the same send answers as the first; anything else ALREADY_EXISTS
    REPLACE = 1  # a SCHEDULED timer gets the new body, properties and time (debounce)
    KEEP = 2  # answer the existing timer, whatever it holds
    # Not in the proto: a cluster node restoring a partition from its log
    # (timerwheel.cluster.journal). A live timer (SCHEDULED, FIRED) is kept as KEEP keeps
    # it; a final one (ACKED, CANCELLED: what this node retired when it gave the partition
    # up earlier) is stored again as new, because the log says it is live.
    RESTORE = 3


# When and SendSpec are built for every message a producer sends, on the thread that
# answers the call: as NamedTuples (immutable, like the frozen dataclasses elsewhere) each
# costs about a third of what a frozen dataclass's __init__ does (which sets each field
# through object.__setattr__; a NamedTuple's __new__ hands them all to tuple.__new__).
class When(NamedTuple):
    kind: WhenKind
    value: int


class MissedPolicy(IntEnum):
    """What a recurring series does with occurrences whose time passed while the server
    was down (or busy); values equal the proto enum `timerwheel.v1.MissedPolicy`."""

    FIRE_ONCE = 0  # the overdue occurrence fires once; the missed ones after it are skipped
    FIRE_EACH = 1  # every missed occurrence fires, each with its own id and time


@dataclass(frozen=True, slots=True)
class Repeat:
    """A recurring series: a fixed interval or a cron expression (in `time_zone`)."""

    every_ms: int = 0
    cron: str = ""
    time_zone: str = ""  # IANA name for cron; "": UTC
    end_at_ms: int = 0  # 0: no end; else no occurrence after this time
    max_count: int = 0  # 0: unlimited; else at most this many occurrences
    missed: MissedPolicy = MissedPolicy.FIRE_ONCE
    # Catch-up bounds (timerwheel.wheels.recurrence.catch_up): missed occurrences older
    # than this before now are skipped (0: no window) ...
    catch_up_window_ms: int = 0
    # ... and of those left, at most this many fire (0: no bound; FIRE_EACH only)
    max_catch_up: int = 0


@dataclass(frozen=True, slots=True)
class SendOptions:
    """What few sends carry beyond a time and a body (stored apart, see timerwheel.store.keys)."""

    max_attempts: int | None = None  # None: Settings.max_attempts; 0: unlimited
    dead_letter_topic: str = ""  # "": "<topic>.dlq"
    repeat: Repeat | None = None  # a recurring series
    retry: RetryPolicy | None = None  # None: the server's (Settings.retry_policy)


# What delivery needs of a message's send options: (max_attempts, 0: no limit; its retry
# policy), each None where the send set none: its topic's default, else the server's
# (timerwheel.wheels.topic_policy). Asked for once per fetched batch
# (FiredSource.delivery_options_of).
DeliveryOptions = tuple[int | None, RetryPolicy | None]


# The properties of a send that has none: one shared, read-only empty mapping.
NO_PROPERTIES: Mapping[str, str] = MappingProxyType({})


class SendSpec(NamedTuple):
    """What a producer asks for, before validation."""

    topic: str
    body: bytes
    when: When
    properties: Mapping[str, str] = NO_PROPERTIES
    message_id: str = ""
    if_exists: IfExists = IfExists.REJECT
    options: SendOptions | None = None


@dataclass(frozen=True, slots=True)
class Timer:
    """A stored timer message, as `Get` reports it."""

    message_id: str
    topic: str
    body: bytes
    properties: Mapping[str, str]
    deliver_at_ms: int
    created_at_ms: int
    state: State
    when: When
    fired_at_ms: int = 0
    acked_at_ms: int = 0
    cancelled_at_ms: int = 0
    ready_seq: int = 0
    wheel: str = ""  # "hour" / "minute" / "second" while SCHEDULED, else ""
    repeat: Repeat | None = None  # a series (Get fills these in)
    next_occurrence: int = 0  # of a series: the number of its next occurrence
    paused: bool = False  # of a series: paused (its occurrences skipped until resumed)
    trace: tuple[TraceEvent, ...] = ()  # its life so far (Get with include_trace)
    attempts: int = 0  # delivery attempts so far (Get with include_trace)

    def same_request(self, spec: SendSpec) -> bool:
        """True when `spec` is a retry of the send that created this timer."""
        return (
            self.topic == spec.topic
            and self.body == spec.body
            and dict(self.properties) == dict(spec.properties)
            and self.when == spec.when
        )


@dataclass(frozen=True, slots=True)
class FiredTimer:
    """A fired, not yet acked timer, in fire order (`seq`) within its topic."""

    seq: int
    timer: Timer
    # The stored record `timer` was decoded from, when at hand: a process hands that on
    # (bytes pickle in C) instead of the decoded Timer (timerwheel.procs.remote_engine,
    # timerwheel.procs.remote_hub).
    record: bytes = b""


class InvalidArgument(TimerwheelError):
    def __init__(self, field_name: str, value: object, reason: str) -> None:
        self.field = field_name
        self.value = value
        self.reason = reason
        super().__init__(f"{field_name}={show(value)}: {reason}")

    def within(self, prefix: str) -> InvalidArgument:
        """The same error for a field inside a container, e.g. ``messages[3].``."""
        return InvalidArgument(prefix + self.field, self.value, self.reason)


class NotFound(TimerwheelError):
    pass


class AlreadyExists(TimerwheelError):
    pass


class FailedPrecondition(TimerwheelError):
    pass


class Overloaded(TimerwheelError):
    """Backpressure: the writer or the un-acked backlog is over its limit."""


class AdmissionRefused(Overloaded):
    """A send refused at the door while the firing loop runs late
    (timerwheel.wheels.admission): refused before anything was validated or stored, so
    any send, even one whose id the server makes, may be sent again as it was after
    `retry_after_ms`. The clients do (timerwheel/retries.py); other backpressure may
    come after part of a call was stored and carries no such promise."""

    def __init__(self, message: str, retry_after_ms: int) -> None:
        self.retry_after_ms = retry_after_ms
        super().__init__(message)


class ShuttingDown(TimerwheelError):
    pass


class DiskFull(Overloaded):
    """The store's disk is full: nothing more can be written until space is freed. The
    writer keeps retrying and resumes by itself (timerwheel.engine.store_health); a
    RESOURCE_EXHAUSTED
    that a client may retry later, like any backpressure."""


class StoreUnavailable(ShuttingDown):
    """The store cannot answer right now (being reopened after a write error, or a read
    failed): UNAVAILABLE, worth retrying."""


def show(value: object, limit: int = 80) -> str:
    """A bounded rendering of a bad value for an error message: a refusal never echoes a
    whole huge value back (an 8 MiB one would not even fit in the reply's trailers)."""
    if isinstance(value, bytes | bytearray):
        return f"<{len(value)} bytes>"
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
