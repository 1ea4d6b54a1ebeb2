"""A send request (`SendRequest`, each message of a `SendBatch`) as the engine's
`SendSpec`: its time, properties, if-exists policy and send options (repeat, retry,
attempt limit, dead-letter topic).

Its own module because it is the one request translation that is more than copying
fields: it runs for every message sent (the usual send takes a short path), it checks
what the proto cannot say (enum ranges, a missing time), and the forwarding and id-scope
interceptors (timerwheel.server.forwarding, timerwheel.server.id_scopes) decode sends
with it too, not only TimerService.

The `when` oneof: proto3 guarantees at most one of deliver_at_ms / delay_ms / delay_level
arrives (setting one clears the others, and a parser keeps the last one on the wire), so
"both" cannot be expressed and only "neither" is checked here. A member set to 0 still
counts as given (`delay_ms=0` means "now").
"""

from __future__ import annotations

from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import (
    NO_PROPERTIES,
    IfExists,
    InvalidArgument,
    MissedPolicy,
    Repeat,
    SendOptions,
    SendSpec,
    When,
    WhenKind,
)
from timerwheel.wheels.retry import RetryKind, RetryPolicy

_WHEN_KINDS = {
    "deliver_at_ms": WhenKind.DELIVER_AT,
    "delay_ms": WhenKind.DELAY,
    "delay_level": WhenKind.LEVEL,
}


def when_from_proto(request, optional: bool = False) -> When:
    """The `when` oneof of a request; InvalidArgument when none is given (unless
    `optional`: then now)."""
    kind = request.WhichOneof("when")
    if kind is None and optional:
        return When(WhenKind.DELAY, 0)
    if kind is None:
        raise InvalidArgument("when", None, "give one of deliver_at_ms, delay_ms or delay_level")
    return When(_WHEN_KINDS[kind], getattr(request, kind))


def specs_from_proto(messages) -> list[SendSpec]:
    """A SendBatch's messages as SendSpecs; an error names its message (``messages[3].``)
    when there is more than one (the engine's field-naming rule, too)."""
    specs: list[SendSpec] = []
    try:
        for message in messages:
            specs.append(spec_from_proto(message))
    except InvalidArgument as exc:
        if len(messages) > 1:
            raise exc.within(f"messages[{len(specs)}].") from None
        raise
    return specs


def spec_from_proto(request: pb.SendRequest) -> SendSpec:
    """A SendRequest as the engine's SendSpec; InvalidArgument when no time is given (a
    repeating send may leave it out: its schedule says when).

    Runs for every message sent, so the usual send (a time, maybe properties, no
    options) is built straight from its fields, at little more than half the cost of a
    frozen-dataclass SendSpec and a call per part; anything else takes
    `_spec_with_options`.
    """
    kind = request.WhichOneof("when")
    if (kind is None or request.HasField("repeat") or request.if_exists
            or request.HasField("max_attempts") or request.dead_letter_topic
            or request.HasField("retry")):  # fmt: skip
        return _spec_with_options(request)
    return SendSpec(
        request.topic,
        request.body,
        When(_WHEN_KINDS[kind], getattr(request, kind)),
        # len() first: dict() of even an empty proto map walks it through the Mapping ABC.
        dict(request.properties) if len(request.properties) else NO_PROPERTIES,
        request.message_id,
    )


def _spec_with_options(request: pb.SendRequest) -> SendSpec:
    """`spec_from_proto` for a send with options, an if_exists policy or no time."""
    when = when_from_proto(request, optional=request.HasField("repeat"))
    return SendSpec(
        request.topic, request.body, when, dict(request.properties),
        request.message_id, _if_exists(request.if_exists), _options(request),
    )  # fmt: skip


def _options(request: pb.SendRequest) -> SendOptions | None:
    """The send options of a request, None when it has none (the usual case)."""
    max_attempts = request.max_attempts if request.HasField("max_attempts") else None
    repeat = _repeat(request.repeat) if request.HasField("repeat") else None
    retry = _retry(request.retry) if request.HasField("retry") else None
    if max_attempts is None and not request.dead_letter_topic and repeat is None and not retry:
        return None
    return SendOptions(max_attempts, request.dead_letter_topic, repeat, retry)


DEFAULT_RETRY = RetryPolicy()


def _retry(message: pb.RetryPolicy) -> RetryPolicy:
    """A send's retry policy; its values are checked with the rest of the send."""
    if message.kind not in (0, RetryKind.FIXED, RetryKind.EXPONENTIAL):
        raise InvalidArgument("retry.kind", message.kind, "must be 0..2")
    kind = RetryKind(message.kind or RetryKind.EXPONENTIAL)
    if kind is RetryKind.FIXED:  # no cap or growth to check: the one wait is the cap
        initial_ms = message.initial_ms
        return RetryPolicy(kind, initial_ms, initial_ms, 1.0, message.jitter_percent)
    # Unset (0) growth and cap take the defaults, so a send may name only initial_ms.
    multiplier = message.multiplier or DEFAULT_RETRY.multiplier
    max_ms = message.max_ms or max(DEFAULT_RETRY.max_ms, message.initial_ms)
    return RetryPolicy(kind, message.initial_ms, max_ms, multiplier, message.jitter_percent)


def _repeat(message: pb.Repeat) -> Repeat:
    try:
        missed = MissedPolicy(message.missed)
    except ValueError:
        raise InvalidArgument("repeat.missed", message.missed, "must be 0..1") from None
    return Repeat(
        every_ms=message.every_ms, cron=message.cron, time_zone=message.time_zone,
        end_at_ms=message.end_at_ms, max_count=message.max_count, missed=missed,
        catch_up_window_ms=message.catch_up_window_ms, max_catch_up=message.max_catch_up,
    )  # fmt: skip


def _if_exists(value: int) -> IfExists:
    if value == IfExists.RESTORE:  # a cluster node's own, never a client's
        raise InvalidArgument("if_exists", value, "must be 0..2")
    try:
        return IfExists(value)
    except ValueError:
        raise InvalidArgument("if_exists", value, "must be 0..2") from None
