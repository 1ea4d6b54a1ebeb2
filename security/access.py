"""Who may call what: the role table and the topic checks of each TimerService method.

| method    | producer        | consumer        | admin |
|-----------|-----------------|-----------------|-------|
| Send, SendBatch, List, Count | its topics | - | yes  |
| Cancel, Reschedule, PauseSeries, ResumeSeries | its topics (by id) | - | yes |
| Get       | its topics (by id) | its topics (by id) | yes |
| ClusterMap | yes            | yes             | yes   |
| Subscribe, Ack, Nack | -    | its topics      | yes   |
| TimerAdmin BulkCancel | its topics (`filter.topic`, required with prefixes) | - | yes |
| TimerAdmin Purge, Redrive, Export, Stats, Topics, InFlight, Consumers, any other | - | - | yes |

"Its topics" is a token's `topics` prefixes (no prefixes: every topic). A request that
names a topic is checked before it runs; for a send that is its topic and, when given,
its dead-letter topic. Cancel, Get, Reschedule, PauseSeries and ResumeSeries name only
an id, whose stored timer's topic is looked up once the id is resolved in the token's id
scope (timerwheel.server.id_scopes, after the request is validated; the guard passes no
look-up here): when it is outside the token's prefixes the answer is the same NOT_FOUND
an unknown id gets, so nothing about other topics' messages leaks, not even that the id
exists. A send's client-chosen id is the token's own (decision 0012): another token's
use of it neither shows nor blocks it. An Ack or Nack for another topic's ids needs no
look-up: the engine acts only on ids in flight on the request's topic, which is checked
here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import grpc

from timerwheel.security.tokens import Principal, Role
from timerwheel.wheels.domain import show

# A refused topic is shown at most this long: whole when it could be a valid topic (the
# default max_topic_len is 127), and never the megabytes a client may send as one.
SHOWN_TOPIC_LEN = 160

SERVICE_PREFIX = "/timerwheel.v1."
TIMER_SERVICE = "/timerwheel.v1.TimerService/"
TIMER_ADMIN = "/timerwheel.v1.TimerAdmin/"

FieldValues = Callable[[object], list[tuple[str, str]]]  # request -> [(field, value)]
TopicOfId = Callable[[str], str | None]  # stored timer's topic, None when there is none


class Denied(Exception):
    """The call is refused: `code` and a message naming the method and the role."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _unknown(message_id: str) -> Denied:
    """Word for word what the engine answers for an id it does not hold."""
    return Denied(grpc.StatusCode.NOT_FOUND, f"message_id={message_id!r}: no such timer")


@dataclass(frozen=True)
class Rule:
    roles: frozenset[Role]
    topics: FieldValues | None = None  # topics the request names
    ids: FieldValues | None = None  # ids whose stored timer must be on the token's topics
    foreign_id: Callable[[str], Denied] = _unknown  # the answer when one is not


def _topic(request) -> list[tuple[str, str]]:
    return [("topic", request.topic)]


def _filter_topic(request) -> list[tuple[str, str]]:
    """A bulk call's topic; empty (every topic) is outside any token's prefixes."""
    return [("filter.topic", request.filter.topic)]


def _message_id(request) -> list[tuple[str, str]]:
    return [("message_id", request.message_id)]


def _series_id(request) -> list[tuple[str, str]]:
    return [("series_id", request.series_id)]


def _unknown_series(series_id: str) -> Denied:
    """Word for word what the engine answers for a series id it does not hold."""
    return Denied(grpc.StatusCode.NOT_FOUND, f"series_id={series_id!r}: no such timer")


def _sends(request) -> list:
    """(field prefix, SendRequest) of a Send or SendBatch request."""
    if not hasattr(request, "messages"):
        return [("", request)]
    many = len(request.messages) > 1
    return [(f"messages[{i}]." if many else "", m) for i, m in enumerate(request.messages)]


def _send_topics(request) -> list[tuple[str, str]]:
    named = []
    for prefix, send in _sends(request):
        named.append((prefix + "topic", send.topic))
        if send.dead_letter_topic:
            named.append((prefix + "dead_letter_topic", send.dead_letter_topic))
    return named


_P, _C, _A = Role.PRODUCER, Role.CONSUMER, Role.ADMIN
_SENDS = Rule(frozenset({_P, _A}), _send_topics)  # its ids: scoped (server/id_scopes.py)
_BY_ID = {"ids": _message_id}
_BY_SERIES_ID = {"ids": _series_id, "foreign_id": _unknown_series}
RULES: dict[str, Rule] = {
    TIMER_SERVICE + "Send": _SENDS,
    TIMER_SERVICE + "SendBatch": _SENDS,
    TIMER_SERVICE + "Cancel": Rule(frozenset({_P, _A}), **_BY_ID),
    TIMER_SERVICE + "Reschedule": Rule(frozenset({_P, _A}), **_BY_ID),
    # Pausing a series is a producer's, as cancelling or rescheduling it is.
    TIMER_SERVICE + "PauseSeries": Rule(frozenset({_P, _A}), **_BY_SERIES_ID),
    TIMER_SERVICE + "ResumeSeries": Rule(frozenset({_P, _A}), **_BY_SERIES_ID),
    TIMER_SERVICE + "Get": Rule(frozenset({_P, _C, _A}), **_BY_ID),
    TIMER_SERVICE + "List": Rule(frozenset({_P, _A}), _topic),
    TIMER_SERVICE + "Count": Rule(frozenset({_P, _A}), _topic),
    TIMER_SERVICE + "Subscribe": Rule(frozenset({_C, _A}), _topic),
    TIMER_SERVICE + "Ack": Rule(frozenset({_C, _A}), _topic),
    TIMER_SERVICE + "Nack": Rule(frozenset({_C, _A}), _topic),
    # Where each partition is owned: what any client routes by (names no topic).
    TIMER_SERVICE + "ClusterMap": Rule(frozenset({_P, _C, _A})),
    # Bulk: cancelling many is a producer's Cancel; purging fired messages and moving
    # dead letters reach into what consumers hold, so only an admin does those.
    TIMER_ADMIN + "BulkCancel": Rule(frozenset({_P, _A}), _filter_topic),
    TIMER_ADMIN + "Purge": Rule(frozenset({_A})),
    TIMER_ADMIN + "Redrive": Rule(frozenset({_A})),
    # Who consumes what, and which message each holds, spans every token's topics.
    TIMER_ADMIN + "InFlight": Rule(frozenset({_A})),
    TIMER_ADMIN + "Consumers": Rule(frozenset({_A})),
}
ADMIN_ONLY = Rule(frozenset({_A}))  # TimerAdmin, and any method added without a rule


def rule_for(method: str) -> Rule:
    return RULES.get(method, ADMIN_ONLY)


def check_role(principal: Principal, method: str, rule: Rule) -> None:
    if principal.role not in rule.roles:
        allowed = ", ".join(sorted(role.value for role in rule.roles))
        raise Denied(
            grpc.StatusCode.PERMISSION_DENIED,
            f"{short_name(method)} is not allowed for {principal.describe()}; "
            f"it needs role {allowed}",
        )


def check_request(
    principal: Principal, method: str, rule: Rule, request, topic_of_id: TopicOfId
) -> None:
    """Raise Denied when the request reaches outside the token's topic prefixes."""
    if not principal.topics:
        return
    for field, topic in rule.topics(request) if rule.topics else ():
        if not principal.may_use(topic):
            raise Denied(
                grpc.StatusCode.PERMISSION_DENIED,
                f"{short_name(method)}: {field}={show(topic, SHOWN_TOPIC_LEN)} is outside "
                f"the topics of {principal.describe()}, which may use topics starting "
                f"{list(principal.topics)}",
            )
    for _, message_id in rule.ids(request) if rule.ids else ():
        topic = topic_of_id(message_id)
        if topic is not None and not principal.may_use(topic):
            raise rule.foreign_id(message_id)


def short_name(method: str) -> str:
    """`/timerwheel.v1.TimerService/Send` -> `TimerService.Send`: what a refusal's message
    names, so a caller of both services sees which one refused."""
    return method.rsplit(".", 1)[-1].replace("/", ".")


def rpc_name(method: str) -> str:
    """`/timerwheel.v1.TimerService/Send` -> `Send`: the `method` label of
    `timerwheel_refusals_total`. The servicers' refusals (timerwheel.server.errors) and
    `grpc_server_*{grpc_method}` name a call so; the two services share no method name."""
    return method.rsplit("/", 1)[-1]
