"""The id scopes of tokens limited to topic prefixes, applied to each call
(docs/decisions/0012-tenant-scoped-client-ids.md; the scopes themselves:
`timerwheel.security.scopes`).

The innermost interceptor: a call reaches it authenticated (the request guard set its
token's scope) and, in a cluster, on the node that owns its ids (forwarding routes by the
id the client sent, and an id's partition is that of its part after the scope). It maps
the ids a scoped token names to the ids stored, and the stored ids it is shown back, so
the engine below sees only stored ids and knows nothing of tokens. Calls of tokens
without prefixes, and every call of a server without tokens, pass through untouched.

For a scoped token, an id it names (`X`, not qualified) is, in this order:
1. its own scope's `<scope>/X`, when that is stored;
2. the unscoped `X`, when that is stored on one of the token's topics: a server-made id,
   an id sent before scopes existed, or one a token of every topic sent there;
3. else `<scope>/X`: where a send stores it, and what a look-up does not find.
An id it names qualified (`/X`, `<scope>/X`, as `security.scopes.view` shows it) is taken
as that stored id. A Get, Cancel, Reschedule, PauseSeries or ResumeSeries whose stored
timer is absent or on another token's topics is answered NOT_FOUND in the engine's words,
with the id as sent: the same code and text either way. A send is validated whole first
(`validate_sends`, and a scoped token's ids as a client may choose them), so an invalid
request is answered before any id is looked up; a send's id that its own scope holds on
another token's topic (an unscoped token may send with a stored id) is answered
ALREADY_EXISTS, never replaced. Ack and Nack ids are mapped without a
look-up (`security.scopes.stored`, the inverse of what deliveries show).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import grpc

from timerwheel.engine.api import TimerApi
from timerwheel.security import scopes
from timerwheel.server.errors import rpc_errors
from timerwheel.server.send_requests import specs_from_proto
from timerwheel.wheels.domain import AlreadyExists, NotFound
from timerwheel.wheels.validation import (
    validate_ack_count,
    validate_client_id,
    validate_message_ref,
    validate_sends,
)

SERVICE = "/timerwheel.v1.TimerService/"
ADMIN = "/timerwheel.v1.TimerAdmin/"


class _Context:
    """The call's context, with the scope's stored ids put back as the token knows them
    in any error the call answers."""

    def __init__(self, context: grpc.ServicerContext, scope: str) -> None:
        self._context = context
        self._scope = scope

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self._context.abort(code, scopes.unscoped_text(self._scope, details))

    def set_details(self, details: str) -> None:
        self._context.set_details(scopes.unscoped_text(self._scope, details))


class _Call:
    """One call's scope and the look-ups it resolves ids with."""

    def __init__(self, engine: TimerApi, scope: str, prefixes: tuple[str, ...]) -> None:
        self.engine = engine
        self.scope = scope
        self.prefixes = prefixes

    def mine(self, topic: str | None) -> bool:
        return topic is not None and topic.startswith(self.prefixes)

    def for_send(self, client_id: str, field: str) -> str:
        """The stored id a send of `client_id` goes to. Its own scope's id on a topic not
        its own (an unscoped token may send with a stored id) is not its to replace or
        read: the answer a conflicting resend gets, naming the id as sent."""
        target, topic = self.resolve(client_id)
        if topic is not None and not self.mine(topic):
            raise AlreadyExists(
                f"{field}={client_id!r}: already used by a different message; "
                "a retry must repeat the original topic, body, properties and time exactly"
            )
        return target

    def checked(self, client_id: str, field: str) -> tuple[str, str | None]:
        """`resolve` of an id first validated as the token wrote it (`/X`: the unscoped X)."""
        unscoped = client_id.startswith(scopes.SEPARATOR)
        validate_message_ref(client_id[1:] if unscoped else client_id, field)
        return self.resolve(client_id)

    def resolve(self, client_id: str) -> tuple[str, str | None]:
        """(stored id, its topic or None) for an id the token names (the module's order)."""
        if client_id.startswith(scopes.SEPARATOR) or scopes.SEPARATOR in client_id:
            target = scopes.stored(self.scope, client_id)
            return target, self.engine.topic_of(target)
        own = scopes.own(self.scope, client_id)
        topic = self.engine.topic_of(own)
        if topic is not None:
            return own, topic
        topic = self.engine.topic_of(client_id)
        if self.mine(topic):
            return client_id, topic
        return own, None

    def by_id(self, client_id: str, field: str) -> str:
        """The stored id a by-id call acts on; NotFound (the engine's words) when it is
        absent or on another token's topics."""
        target, topic = self.checked(client_id, field)
        if not self.mine(topic):
            raise NotFound(f"{field}={client_id!r}: no such timer")
        return target


class IdScopes(grpc.ServerInterceptor):
    def __init__(self, engine: TimerApi) -> None:
        self._engine = engine
        self._methods: dict[str, Callable] = {
            SERVICE + "Send": self._send,
            SERVICE + "SendBatch": self._send_batch,
            SERVICE + "Get": self._by_id("message_id"),
            SERVICE + "Cancel": self._by_id("message_id"),
            SERVICE + "Reschedule": self._by_id("message_id"),
            SERVICE + "PauseSeries": self._by_id("series_id"),
            SERVICE + "ResumeSeries": self._by_id("series_id"),
            SERVICE + "Ack": self._settle,
            SERVICE + "Nack": self._settle,
            SERVICE + "List": self._list,
            ADMIN + "BulkCancel": self._bulk_cancel,
        }

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None:
            return handler
        method = details.method
        name = method.rsplit("/", 1)[-1]
        if method == SERVICE + "Subscribe" and handler.unary_stream is not None:
            return self._subscribe(handler)
        translate = self._methods.get(method)
        if translate is None or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary

        def unary(request, context):
            scope, prefixes = scopes.call_scope()
            if not scope:
                return behaviour(request, context)
            call = _Call(self._engine, scope, prefixes)
            with rpc_errors(context, name):
                finish = translate(call, request)
            response = behaviour(request, _Context(context, scope))
            if finish is not None:
                finish(response)
            return response

        return grpc.unary_unary_rpc_method_handler(
            unary, handler.request_deserializer, handler.response_serializer
        )

    # -- sends ---------------------------------------------------------------------------
    def _send(self, call: _Call, request) -> Callable | None:
        if not request.message_id:
            return None  # a server-made id: nothing to map
        given = request.message_id
        self._validate(call, [request])
        request.message_id = call.for_send(given, "message_id")

        def finish(response) -> None:
            response.message_id = given

        return finish

    def _send_batch(self, call: _Call, request) -> Callable | None:
        messages = request.messages
        if not any(message.message_id for message in messages):
            return None
        self._validate(call, messages)
        given = [message.message_id for message in messages]
        many = len(messages) > 1
        for index, message in enumerate(messages):
            if message.message_id:
                field = f"messages[{index}].message_id" if many else "message_id"
                message.message_id = call.for_send(message.message_id, field)

        def finish(response) -> None:
            for result, client_id in zip(response.results, given, strict=False):
                if client_id:
                    result.message_id = client_id

        return finish

    def _validate(self, call: _Call, messages) -> None:
        """The whole send as the engine checks it, and its ids as a client may choose them
        (a scoped token never names a stored id in a send), before any look-up."""
        prefix = len(messages) > 1
        for index, message in enumerate(messages):
            if message.message_id:
                field = f"messages[{index}].message_id" if prefix else "message_id"
                validate_client_id(message.message_id, field)
        validate_sends(specs_from_proto(messages), call.engine.now_ms(), call.engine.settings)

    # -- by id ---------------------------------------------------------------------------
    @staticmethod
    def _by_id(field: str) -> Callable:
        def translate(call: _Call, request) -> Callable | None:
            given = getattr(request, field)
            setattr(request, field, call.by_id(given, field))
            if field != "message_id":
                return None

            def finish(response) -> None:
                if hasattr(response, "topic"):  # a TimerMessage (Get): as it was asked for
                    response.message_id = given

            return finish

        return translate

    def _settle(self, call: _Call, request) -> None:
        """Ack and Nack: each id as deliveries showed it, mapped back without a look-up
        (the engine acts only on ids in flight on the request's topic)."""
        ids = request.message_ids
        method = "Ack" if not hasattr(request, "reason") else "Nack"
        validate_ack_count(len(ids), call.engine.settings, method)
        mapped = [scopes.stored(call.scope, message_id) for message_id in ids]
        del ids[:]
        ids.extend(mapped)

    def _bulk_cancel(self, call: _Call, request) -> None:
        """A bulk cancel's series and id prefix, in the token's scope. The prefix is its
        own ids' (`/P`: unscoped ones'); ids of the server's form are not matched by a
        plain prefix (their prefix is a time: use from_ms and to_ms)."""
        bulk = request.filter
        if bulk.series_id:
            bulk.series_id = call.checked(bulk.series_id, "filter.series_id")[0]
        prefix = bulk.id_prefix
        if prefix:
            validate_message_ref(prefix.lstrip(scopes.SEPARATOR) or prefix, "filter.id_prefix")
            bulk.id_prefix = scopes.stored(call.scope, prefix)

    def _list(self, call: _Call, request) -> Callable:
        def finish(response) -> None:
            for message in response.messages:
                message.message_id = scopes.view(call.scope, message.message_id)

        return finish

    # -- deliveries ----------------------------------------------------------------------
    def _subscribe(self, handler) -> grpc.RpcMethodHandler:
        behaviour = handler.unary_stream

        def stream(request, context) -> Iterator:
            scope, _ = scopes.call_scope()
            if not scope:
                yield from behaviour(request, context)
                return
            batches = behaviour(request, _Context(context, scope))
            try:
                for batch in batches:
                    for delivery in batch.deliveries:
                        delivery.message_id = scopes.view(scope, delivery.message_id)
                    yield batch
            finally:
                batches.close()

        return grpc.unary_stream_rpc_method_handler(
            stream, handler.request_deserializer, handler.response_serializer
        )
