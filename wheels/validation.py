"""Validation of what producers send, and resolution of "when" into deliver_at_ms.

Pure: the caller passes `now_ms`. Every rejection names the field and the bad value and
happens before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache

from timerwheel.wheels.domain import InvalidArgument, SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.recurrence import validate_repeat
from timerwheel.wheels.retry import check_policy
from timerwheel.wheels.settings import Settings

# RocketMQ's topic charset (plus '.'), bounded by Settings.max_topic_len.
_TOPIC_RE = re.compile(r"[A-Za-z0-9_.%|-]+")
# Client-chosen message ids: printable, no separators that would confuse the key codec.
_MESSAGE_ID_RE = re.compile(r"[A-Za-z0-9_.:@-]+")
# Ids the server makes may also hold '#': an occurrence of a recurring series is
# "<series id>#<n>", which no client-chosen id can collide with.
_MESSAGE_REF_RE = re.compile(r"[A-Za-z0-9_.:@#-]+")
MAX_MESSAGE_ID_LEN = 128
MAX_MESSAGE_REF_LEN = MAX_MESSAGE_ID_LEN + 21  # '#' and an occurrence number
# A stored id may be qualified by the namespace (id scope) the server keeps it in,
# `<scope>/<id>` (timerwheel.security.scopes): '/' is in no client id and no topic, so a
# client cannot spell one in a send without the server's translation. The bounds above
# apply to the part after the scope.
_SCOPE = r"[A-Za-z0-9_.%|,~-]{1,64}"
_SCOPE_RE = re.compile(_SCOPE)


def validate_topic(topic: str, settings: Settings, field: str = "topic") -> str:
    max_len = settings.max_topic_len
    if len(topic) > max_len:  # before the cache, so it never keeps a huge refused topic
        raise InvalidArgument(field, topic, f"is {len(topic)} characters; at most {max_len}")
    problem = _topic_problem(topic)
    if problem:
        raise InvalidArgument(field, topic, problem)
    return topic


MAX_CONSUMER_NAME = 128


def validate_consumer_name(name: str) -> str:
    """A subscriber's name as traces show it: short and printable (or empty)."""
    if len(name) > MAX_CONSUMER_NAME:
        raise InvalidArgument(
            "consumer", name, f"is {len(name)} characters; at most {MAX_CONSUMER_NAME}"
        )
    if not name.isprintable():
        raise InvalidArgument("consumer", name, "must hold only printable characters")
    return name


@lru_cache(maxsize=4096)
def _topic_problem(topic: str) -> str:
    """Why `topic` (already within max_topic_len) is refused, '' when it is fine. Cached:
    producers reuse few topics; its memory is bounded by maxsize x max_topic_len."""
    if not topic:
        return "must not be empty"
    if not _TOPIC_RE.fullmatch(topic):
        return "may hold only letters, digits and _ . % | -"
    return ""


def validate_message_id(message_id: str, field: str = "message_id") -> str:
    """A send's id: a client's, or one the server qualified by its id scope."""
    if "/" in message_id:
        return _validate_scoped(message_id, field, validate_client_id)
    return validate_client_id(message_id, field)


def validate_client_id(message_id: str, field: str = "message_id") -> str:
    """An id as a client may choose it (never qualified by a scope)."""
    if not message_id:
        raise InvalidArgument(field, message_id, "must not be empty")
    if len(message_id) > MAX_MESSAGE_ID_LEN:
        raise InvalidArgument(
            field, message_id, f"is {len(message_id)} characters; at most {MAX_MESSAGE_ID_LEN}"
        )
    if not _MESSAGE_ID_RE.fullmatch(message_id):
        raise InvalidArgument(field, message_id, "may hold only letters, digits and _ . : @ -")
    return message_id


def validate_message_ref(message_id: str, field: str = "message_id") -> str:
    """An id a client refers to (get, cancel, ack, nack): any id the server may hold,
    including an occurrence id ``<series id>#<n>``."""
    if "/" in message_id:
        return _validate_scoped(message_id, field, validate_message_ref)
    if not message_id:
        raise InvalidArgument(field, message_id, "must not be empty")
    if len(message_id) > MAX_MESSAGE_REF_LEN:
        raise InvalidArgument(
            field, message_id, f"is {len(message_id)} characters; at most {MAX_MESSAGE_REF_LEN}"
        )
    if not _MESSAGE_REF_RE.fullmatch(message_id):
        raise InvalidArgument(field, message_id, "may hold only letters, digits and _ . : @ # -")
    return message_id


def _validate_scoped(message_id: str, field: str, validate) -> str:
    """An id qualified by its scope: the scope, then the id as `validate` checks it."""
    scope, _, rest = message_id.partition("/")
    if not _SCOPE_RE.fullmatch(scope) or "/" in rest:
        raise InvalidArgument(
            field, message_id, "may be qualified by an id scope only as <scope>/<id>"
        )
    validate(rest, field)
    return message_id


# An Ack's or a Nack's ids in one regex pass over them joined by newlines: about a
# quarter of the cost of checking them one by one (one C-level match, no Python call per
# id). A newline inside an id would pass as a separator, so the newlines are counted
# too. Only when the pass fails are the ids checked one by one, for the error that names
# the first bad one. Ids with a scope take a second regex, only when a '/' is there: the
# optional scope would otherwise be tried (and given up) at every id of the usual Ack.
_MESSAGE_REFS_RE = re.compile(rf"(?:[A-Za-z0-9_.:@#-]{{1,{MAX_MESSAGE_REF_LEN}}}\n)*")
_SCOPED_REFS_RE = re.compile(rf"(?:(?:{_SCOPE}/)?[A-Za-z0-9_.:@#-]{{1,{MAX_MESSAGE_REF_LEN}}}\n)*")


def validate_message_refs(message_ids: list[str], field: str = "message_ids") -> None:
    """`validate_message_ref` for every id of a list; the error names its index."""
    joined = "\n".join(message_ids) + "\n"
    refs = _SCOPED_REFS_RE if "/" in joined else _MESSAGE_REFS_RE
    if joined.count("\n") == len(message_ids) and refs.fullmatch(joined):
        return
    for index, message_id in enumerate(message_ids):
        validate_message_ref(message_id, f"{field}[{index}]")


def validate_ack_count(count: int, settings: Settings, call: str = "Ack") -> None:
    """One Ack's or Nack's ids are bounded by `max_ack_ids`: an Ack's are one writer
    operation, so the loop that fires is never held long by a single call, and a Nack's
    are held as a list while the delivery lock is taken, so a few huge ones at once would
    take the server's memory. Checked on the count, before any id is copied."""
    if count > settings.max_ack_ids:
        raise InvalidArgument(
            "message_ids", f"<{count} ids>", f"at most {settings.max_ack_ids} per {call}"
        )


def validate_properties(props: Mapping[str, str], settings: Settings, field: str) -> None:
    if len(props) > settings.max_properties:
        raise InvalidArgument(
            field, f"<{len(props)} entries>", f"at most {settings.max_properties} properties"
        )
    total = 0
    for key, value in props.items():
        if not key:
            raise InvalidArgument(f"{field}[{key!r}]", key, "property keys must not be empty")
        if len(key) > settings.max_property_key_len:
            raise InvalidArgument(
                f"{field}[{key[:20]!r}...]",
                key,
                f"key is {len(key)} characters; at most {settings.max_property_key_len}",
            )
        if len(value) > settings.max_property_value_len:
            raise InvalidArgument(
                f"{field}[{key!r}]",
                value,
                f"value is {len(value)} characters; at most {settings.max_property_value_len}",
            )
        total += len(key.encode()) + len(value.encode())
    if total > settings.max_properties_bytes:
        raise InvalidArgument(
            field,
            f"<{total} bytes>",
            f"properties total at most {settings.max_properties_bytes} bytes",
        )


def resolve_deliver_at_ms(when: When, now_ms: int, settings: Settings, prefix: str = "") -> int:
    """The absolute delivery time for `when`, or InvalidArgument naming the field.

    Runs once per message: the common, valid cases return first; errors are worked out
    only when the fast checks fail.
    """
    kind, value = when.kind, when.value
    if kind is _DELAY:
        if 0 <= value <= settings.max_delay_ms:
            return now_ms + value
    elif kind is _LEVEL:
        levels = settings.delay_levels_ms
        if 1 <= value <= len(levels):
            return now_ms + levels[value - 1]
    elif now_ms - settings.max_past_ms <= value <= now_ms + settings.max_delay_ms:
        return value
    raise _when_error(kind, value, now_ms, settings, prefix)


_DELAY, _LEVEL = WhenKind.DELAY, WhenKind.LEVEL


def _when_error(
    kind: WhenKind, value: int, now_ms: int, settings: Settings, prefix: str
) -> InvalidArgument:
    if kind is _DELAY:
        if value < 0:
            return InvalidArgument(prefix + "delay_ms", value, "must not be negative")
        reason = f"exceeds the maximum delay of {settings.max_delay_ms} ms"
        return InvalidArgument(prefix + "delay_ms", value, reason)
    if kind is _LEVEL:
        reason = f"must be 1..{len(settings.delay_levels_ms)}"
        return InvalidArgument(prefix + "delay_level", value, reason)
    if value < now_ms:
        reason = (
            f"is more than {settings.max_past_ms} ms in the past (now is {now_ms}); "
            "past times within that window fire at once"
        )
    else:
        reason = f"is beyond the maximum delay of {settings.max_delay_ms} ms from now ({now_ms})"
    return InvalidArgument(prefix + "deliver_at_ms", value, reason)


def validate_send(spec: SendSpec, now_ms: int, settings: Settings, prefix: str = "") -> int:
    """Check every field of `spec`; return its deliver_at_ms."""
    if len(spec.topic) > settings.max_topic_len or _topic_problem(spec.topic):
        validate_topic(spec.topic, settings, prefix + "topic")
    if len(spec.body) > settings.max_body_bytes:
        raise InvalidArgument(
            prefix + "body",
            spec.body,
            f"is {len(spec.body)} bytes; at most {settings.max_body_bytes}",
        )
    if spec.properties:
        validate_properties(spec.properties, settings, prefix + "properties")
    if spec.message_id:
        validate_message_id(spec.message_id, prefix + "message_id")
    elif spec.if_exists:
        raise InvalidArgument(
            prefix + "if_exists", spec.if_exists.name, "applies to a client-chosen message_id"
        )
    deliver_at_ms = resolve_deliver_at_ms(spec.when, now_ms, settings, prefix)
    if spec.options is not None:
        validate_options(spec.topic, spec.options, settings, prefix)
        if spec.options.repeat is not None:  # a series: its first occurrence's time
            deliver_at_ms = validate_repeat(spec.options.repeat, deliver_at_ms, settings, prefix)
    return deliver_at_ms


MAX_ATTEMPTS_LIMIT = 1_000


def validate_options(topic: str, options: SendOptions, settings: Settings, prefix: str) -> None:
    """max_attempts within 0..MAX_ATTEMPTS_LIMIT; a dead-letter topic that is a topic; a
    retry policy that `check_policy` accepts."""
    if options.retry is not None:
        problem = check_policy(options.retry)
        if problem is not None:
            field, value, why = problem
            raise InvalidArgument(prefix + "retry." + field, value, why)
    max_attempts = options.max_attempts
    if max_attempts is not None and not 0 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise InvalidArgument(
            prefix + "max_attempts", max_attempts,
            f"must be 0..{MAX_ATTEMPTS_LIMIT} (0: unlimited; unset: the server's default)",
        )  # fmt: skip
    if options.dead_letter_topic:
        validate_topic(options.dead_letter_topic, settings, prefix + "dead_letter_topic")
        if options.dead_letter_topic == topic:
            raise InvalidArgument(
                prefix + "dead_letter_topic", topic, "must differ from the message's own topic"
            )
    elif len(topic) + len(DEAD_LETTER_SUFFIX) > settings.max_topic_len:
        raise InvalidArgument(
            prefix + "dead_letter_topic", "",
            f"the default {topic + DEAD_LETTER_SUFFIX!r} is too long; name a shorter one",
        )  # fmt: skip


DEAD_LETTER_SUFFIX = ".dlq"


def dead_letter_topic(topic: str, options: SendOptions | None) -> str:
    """Where a message that ran out of attempts goes: its own choice, or `<topic>.dlq`."""
    if options is not None and options.dead_letter_topic:
        return options.dead_letter_topic
    return topic + DEAD_LETTER_SUFFIX


def validate_sends(specs: list[SendSpec], now_ms: int, settings: Settings) -> list[int]:
    """`validate_send` for a batch: the deliver_at_ms of each, or the first error.

    In a batch of more than one, errors name the message: ``messages[3].topic``. Sends
    with nothing optional (no properties, no client id) and a fine topic and body, the
    usual case on the hot path, only need their time resolved.
    """
    max_topic_len, max_body = settings.max_topic_len, settings.max_body_bytes
    deliver_times_ms = []
    for index, spec in enumerate(specs):
        try:
            if (
                spec.properties
                or spec.message_id
                or spec.if_exists
                or spec.options
                or len(spec.body) > max_body
                or len(spec.topic) > max_topic_len
                or _topic_problem(spec.topic)
            ):
                deliver_times_ms.append(validate_send(spec, now_ms, settings))
            else:
                deliver_times_ms.append(resolve_deliver_at_ms(spec.when, now_ms, settings))
        except InvalidArgument as exc:
            raise (exc.within(f"messages[{index}].") if len(specs) > 1 else exc) from None
    return deliver_times_ms


MAX_REASON_LEN = 1_024  # a nack's reason, kept on a dead letter


def validate_nack(
    message_ids: list[str], reason: str, redeliver_after_ms: int, settings: Settings,
    release: bool = False,
) -> None:  # fmt: skip
    """A Nack's fields: at most `max_ack_ids` ids, a bounded reason, a backoff within the
    maximum delay. A release is not a failure: it has no reason to keep and goes back at
    once, so either field set with it is a client's mistake, refused rather than ignored."""
    validate_ack_count(len(message_ids), settings, "Nack")
    validate_message_refs(message_ids)
    if release and reason:
        raise InvalidArgument("reason", reason, "must be empty with release (not a failure)")
    if release and redeliver_after_ms:
        raise InvalidArgument(
            "redeliver_after_ms", redeliver_after_ms, "must be 0 with release (redelivered at once)"
        )
    if len(reason) > MAX_REASON_LEN:
        raise InvalidArgument(
            "reason", reason, f"is {len(reason)} characters; at most {MAX_REASON_LEN}"
        )
    if not 0 <= redeliver_after_ms <= settings.max_delay_ms:
        raise InvalidArgument(
            "redeliver_after_ms",
            redeliver_after_ms,
            f"must be 0..{settings.max_delay_ms} (0: after the message's retry backoff)",
        )
