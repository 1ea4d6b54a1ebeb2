"""The one server interceptor in front of the timerwheel services: decode, then authorize.

Decoding. grpcio deserializes a request before any handler runs and answers INTERNAL
"Exception deserializing request!" when that fails, e.g. for a string field that is not
UTF-8. The guard wraps each method's deserializer so a failure becomes a marker value,
and the wrapped handler answers it with INVALID_ARGUMENT naming the method and message
type: the client's bytes are the problem, not the server.

Authorization (only when the server has a token file). The bearer token comes from the
call's metadata (`authorization: Bearer <token>`). No token, or an unknown one:
UNAUTHENTICATED. A role the method does not allow: PERMISSION_DENIED, checked before the
request is even decoded. Topics outside the token's prefixes: see `timerwheel.security.access`.
Every refusal names the method and the token's name and role, never the token.

A refusal does not wait for the request: it is answered from a request-streaming handler,
which grpcio runs without reading the request first (a unary handler's thread waits for
it), so a caller without a token who sends headers and never the request holds no thread.

Reading (with a byte budget and a receive gate: every server; unit tests of the access
rules go without). An admitted call is handed on request-streaming, so grpcio runs it
before reading its request; it reads the request itself within a place of the gate
(timerwheel.security.limits.ReceiveGate: a few at once, in turns, one place fewer per
caller: a token, else a connection), the call cancelled if it has not come within
`request_read_timeout_ms` (timerwheel.security.read_timeout), and the request's wire
bytes are charged to `max_inflight_request_bytes` before protobuf decodes them
(`charging`): over the budget it is refused RESOURCE_EXHAUSTED undecoded.
The charge is given back when the call ends. The caller a call counts against (its
token's name) is set for the call (`set_caller`), for Subscribe's per-token limit.

Health is not guarded: an orchestrator's probe carries no token. Reflection describes
only the public API (proto/), which holds nothing secret, but each stream holds a thread
while open, so with a token file it needs a known token (any role); without one it is
open to all, like every call. Both run within budgets of their own
(timerwheel.server.stream_pool `Probes`), token or not.
"""

from __future__ import annotations

from collections.abc import Callable

import grpc
import structlog

from timerwheel.observability import metrics
from timerwheel.security.access import (
    SERVICE_PREFIX,
    Denied,
    TopicOfId,
    check_request,
    check_role,
    rpc_name,
    rule_for,
    short_name,
)
from timerwheel.security.limits import ByteBudget, ReceiveGate, set_caller, share_identity
from timerwheel.security.read_timeout import ReadTimer, next_request
from timerwheel.security.scopes import set_call_scope
from timerwheel.security.tokens import Principal, TokenTable
from timerwheel.wheels.domain import Overloaded

log = structlog.get_logger("timerwheel.guard")

BEARER = "bearer "
REFLECTION_PREFIX = "/grpc.reflection."  # v1alpha and v1: ServerReflectionInfo


class Undecodable:
    """What the wrapped deserializer returns for bytes that do not parse."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def tolerant(deserializer: Callable[[bytes], object]) -> Callable[[bytes], object]:
    def deserialize(data: bytes) -> object:
        try:
            return deserializer(data)
        except Exception as exc:  # protobuf's DecodeError, or anything a parser raises
            return Undecodable(str(exc) or type(exc).__name__)

    return deserialize


class Charged:
    """A decoded request and the bytes it holds of the process's budget until its call ends."""

    __slots__ = ("request", "size")

    def __init__(self, request: object, size: int) -> None:
        self.request = request
        self.size = size


# Requests that are a few fields of bounded size, and that a call keeps for as long as it
# runs: a Subscribe stream holds its request (and its charge) while open, so a request
# padded to megabytes (unknown fields) would hold that much for hours, up to
# max_subscribers times. Above its bound such a request is refused undecoded.
SMALL_REQUESTS = {
    # a topic of at most max_topic_len (127) and a consumer name of at most 128 characters
    "/timerwheel.v1.TimerService/Subscribe": 4096,
}


class Refused:
    """What the charging deserializer returns for a request over the byte budget, or one
    over its method's bound (`code` says which)."""

    __slots__ = ("code", "reason")

    def __init__(
        self, reason: str, code: grpc.StatusCode = grpc.StatusCode.RESOURCE_EXHAUSTED
    ) -> None:
        self.code = code
        self.reason = reason


def charging(
    deserializer: Callable[[bytes], object], budget: ByteBudget, what: str,
    largest: int | None = None,
) -> Callable[[bytes], object]:  # fmt: skip
    """`deserializer` that first charges the request's wire bytes to `budget`: over it, the
    request is refused undecoded (its bytes are dropped at once); an undecodable one gives
    its bytes back. The call gives a Charged request's bytes back when it ends."""

    def deserialize(data: bytes) -> object:
        size = len(data)
        if largest is not None and size > largest:
            return Refused(
                f"{what}: a request of {size} bytes; at most {largest}",
                grpc.StatusCode.INVALID_ARGUMENT,
            )
        try:
            budget.take(size, f"{what} request")
        except Overloaded as exc:
            return Refused(str(exc))
        try:
            return Charged(deserializer(data), size)
        except Exception as exc:  # protobuf's DecodeError, or anything a parser raises
            budget.give_back(size)
            return Undecodable(str(exc) or type(exc).__name__)

    return deserialize


class RequestGuard(grpc.ServerInterceptor):
    """`budget`: the process's bytes of calls in progress (`max_inflight_request_bytes`),
    charged with each request's bytes before it is decoded; `gate`: how many requests are
    read at once (timerwheel.security.limits.ReceiveGate); `reads`: how long a read may
    take (timerwheel.security.read_timeout; None: as long as the call lasts). Without a
    budget and a gate (unit tests of the access rules) requests are read as grpcio does."""

    def __init__(
        self, tokens: TokenTable | None, topic_of_id: TopicOfId,
        budget: ByteBudget | None = None, gate: ReceiveGate | None = None,
        reads: ReadTimer | None = None,
    ) -> None:  # fmt: skip
        self._tokens = tokens
        self._topic_of_id = topic_of_id
        self._budget = budget
        self._gate = gate
        self._reads = reads

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        method = details.method
        reflection = handler is not None and method.startswith(REFLECTION_PREFIX)
        if reflection and self._tokens is not None:
            try:
                self._principal(method, details.invocation_metadata)
            except Denied as denied:
                return _refusal(handler, denied, method)
            return handler
        if handler is None or not method.startswith(SERVICE_PREFIX):
            return handler  # unknown methods (UNIMPLEMENTED), health, reflection
        if handler.request_streaming:
            return handler  # none of ours stream requests; nothing to wrap
        try:
            principal = self._authenticate(method, details.invocation_metadata)
        except Denied as denied:
            return _refusal(handler, denied, method)
        if principal is not None:  # in the call's context: whose turn it takes in the pool
            set_caller(principal.name)  # (timerwheel.security.fair_pool)
        check = self._request_check(principal, method)
        if self._budget is None or self._gate is None:
            return _wrapped(handler, method, check, principal)
        return _admitted(
            handler, method, check, principal, self._budget, self._gate, self._reads
        )  # fmt: skip

    def _authenticate(self, method: str, metadata) -> Principal | None:
        """The caller's principal (None when the server has no tokens); Denied if refused."""
        if self._tokens is None:
            return None
        principal = self._principal(method, metadata)
        try:
            check_role(principal, method, rule_for(method))
        except Denied:
            _log_denied(method, principal, "role")
            raise
        return principal

    def _principal(self, method: str, metadata) -> Principal:
        """The known token's principal, or Denied (UNAUTHENTICATED)."""
        assert self._tokens is not None
        values = [value for key, value in metadata or () if key == "authorization"]
        bearer = values[0] if len(values) == 1 and isinstance(values[0], str) else ""
        if not bearer.lower().startswith(BEARER) or not bearer[len(BEARER) :].strip():
            _log_denied(method, None, "no bearer token")
            raise Denied(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{short_name(method)}: no bearer token; send metadata "
                "'authorization: Bearer <token>' (CLI: --token-file or TIMERWHEEL_TOKEN)",
            )
        principal = self._tokens.authenticate(bearer[len(BEARER) :].strip())
        if principal is None:
            _log_denied(method, None, "unknown token")
            raise Denied(
                grpc.StatusCode.UNAUTHENTICATED,
                f"{short_name(method)}: the bearer token is not one this server knows",
            )
        return principal

    def _request_check(self, principal: Principal | None, method: str):
        if principal is None or not principal.topics:
            return None
        rule = rule_for(method)

        def check(request) -> None:
            try:
                # The ids a request names are not looked up here: a scoped token's ids
                # are resolved in its id scope first (timerwheel.server.id_scopes, which
                # answers an id on another token's topics as an unknown one).
                check_request(principal, method, rule, request, _no_timer)
            except Denied as denied:
                if denied.code is grpc.StatusCode.PERMISSION_DENIED:
                    _log_denied(method, principal, "topic")
                raise

        return check


def _no_timer(_message_id: str) -> None:
    return None


def _wrapped(handler, method: str, check, principal: Principal | None) -> grpc.RpcMethodHandler:
    """The handler with a tolerant deserializer and the checks before its behaviour."""

    def admit(request, context) -> None:
        if principal is not None:
            set_caller(principal.name)
            set_call_scope(principal.topics, principal.id_scope)
        _refuse_undecodable(request, method, context)
        if check is not None:
            try:
                check(request)
            except Denied as denied:
                metrics.recorder().refused(rpc_name(method), denied.code.name)
                context.abort(denied.code, str(denied))

    deserialize = tolerant(handler.request_deserializer)
    if handler.response_streaming:
        inner_stream = handler.unary_stream

        def stream(request, context):
            admit(request, context)
            yield from inner_stream(request, context)

        return grpc.unary_stream_rpc_method_handler(
            stream, deserialize, handler.response_serializer
        )
    inner = handler.unary_unary

    def unary(request, context):
        admit(request, context)
        return inner(request, context)

    return grpc.unary_unary_rpc_method_handler(unary, deserialize, handler.response_serializer)


def _admitted(
    handler, method: str, check, principal: Principal | None, budget: ByteBudget,
    gate: ReceiveGate, reads: ReadTimer | None,
) -> grpc.RpcMethodHandler:  # fmt: skip
    """The handler as one that reads its own request: within a place of `gate`, charged to
    `budget` before it is decoded (`charging`), then checked as `_wrapped` does. Returned
    request-streaming, so grpcio runs it before reading anything; `one_request` on the
    behaviour tells the pools (timerwheel.server.stream_pool) it is a unary call still."""
    name = short_name(method)
    deserialize = charging(handler.request_deserializer, budget, name, SMALL_REQUESTS.get(method))

    def receive(requests, context) -> Charged:
        if principal is not None:
            set_caller(principal.name)  # what caller_identity() counts this call against
            set_call_scope(principal.topics, principal.id_scope)  # timerwheel.server.id_scopes
        key = share_identity(context)  # its token, else its connection
        if not gate.acquire(key, context.is_active):
            context.abort(
                grpc.StatusCode.CANCELLED, f"{name}: the call ended before its request was read"
            )
        try:
            got = next_request(requests, context, reads, name, rpc_name(method))
        finally:
            gate.release(key)
        if isinstance(got, Charged):
            return got
        if got is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{name}: expects one request")
        if isinstance(got, Refused):
            metrics.recorder().refused(rpc_name(method), got.code.name)
            context.abort(got.code, got.reason)
        _refuse_undecodable(got, method, context)
        raise AssertionError(f"unexpected request {got!r}")  # pragma: no cover

    def admit(request, context) -> None:
        if check is not None:
            try:
                check(request)
            except Denied as denied:
                metrics.recorder().refused(rpc_name(method), denied.code.name)
                context.abort(denied.code, str(denied))

    if handler.response_streaming:
        inner_stream = handler.unary_stream

        def stream(requests, context):
            got = receive(requests, context)
            try:
                admit(got.request, context)
                yield from inner_stream(got.request, context)
            finally:
                budget.give_back(got.size)

        stream.one_request = True  # type: ignore[attr-defined]
        return grpc.stream_stream_rpc_method_handler(
            stream, deserialize, handler.response_serializer
        )
    inner = handler.unary_unary

    def unary(requests, context):
        got = receive(requests, context)
        try:
            admit(got.request, context)
            return inner(got.request, context)
        finally:
            budget.give_back(got.size)

    unary.one_request = True  # type: ignore[attr-defined]
    return grpc.stream_unary_rpc_method_handler(unary, deserialize, handler.response_serializer)


def _refuse_undecodable(request, method: str, context) -> None:
    if isinstance(request, Undecodable):
        metrics.recorder().refused(rpc_name(method), "INVALID_ARGUMENT")
        context.abort(
            grpc.StatusCode.INVALID_ARGUMENT,
            f"{short_name(method)}: the request does not decode ({request.reason}); "
            "string fields must be valid UTF-8",
        )


def _refusal(handler, denied: Denied, method: str) -> grpc.RpcMethodHandler:
    """A handler that refuses without reading the request: neither decoding it (it may be
    huge) nor waiting for it (it may never come). Request-streaming whatever the method
    is: grpcio hands such a behaviour the request iterator at once, which it leaves unread."""

    def refuse(_requests, context):
        metrics.recorder().refused(rpc_name(method), denied.code.name)
        context.abort(denied.code, str(denied))

    # It waits for nothing: answered on the thread grpcio submits it from, taking no
    # thread and no place of a pool (timerwheel.security.fair_pool `at_once`).
    refuse.at_once = True  # type: ignore[attr-defined]

    def ignore(_data: bytes) -> object:
        return denied  # not decoded; grpcio takes None for a failed decode, so not None

    if handler.response_streaming:
        return grpc.stream_stream_rpc_method_handler(refuse, ignore, handler.response_serializer)
    return grpc.stream_unary_rpc_method_handler(refuse, ignore, handler.response_serializer)


def _log_denied(method: str, principal: Principal | None, why: str) -> None:
    log.warning(
        "rpc_denied", method=short_name(method), why=why,
        token=principal.name if principal else None,
        role=principal.role.value if principal else None,
    )  # fmt: skip
