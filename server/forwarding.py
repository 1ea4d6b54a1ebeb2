"""Calls on another node's partition, passed on to its owner (cluster mode, docs/cluster.md).

A unary TimerService call that names message ids (Send and SendBatch with client-chosen
ids, Get, Cancel, Reschedule) whose partition another node owns is passed on as it came:
its bytes, its metadata (the caller's token included: the owner checks it again) and
what is left of its deadline; the owner's answer, or its error, goes back as it is. So a
plain gRPC client (grpcurl) can call any node.

One hop only: a call that arrives forwarded (`timerwheel-forwarded` in its metadata) is
answered where it lands, "not owner" if ownership moved meanwhile, and the caller retries.
The interceptor is the innermost, after the request guard: a call is authenticated here
before it costs the owner anything. Calls between nodes use plain channels: with TLS on
(`--tls-cert`) nothing is forwarded and the caller gets the "not owner" answer instead.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc

FORWARDED = "timerwheel-forwarded"
SERVICE = "/timerwheel.v1.TimerService/"

# method -> the ids a request names (an empty id: a server-made one, decided here)
ROUTED: dict[str, Callable[[Any], list[str]]] = {
    SERVICE + "Send": lambda request: [request.message_id],
    SERVICE + "SendBatch": lambda request: [m.message_id for m in request.messages],
    SERVICE + "Get": lambda request: [request.message_id],
    SERVICE + "Cancel": lambda request: [request.message_id],
    SERVICE + "Reschedule": lambda request: [request.message_id],
}


def is_forwarded(invocation_metadata) -> bool:
    """The call came from another node (one hop: it is answered where it lands)."""
    return any(key == FORWARDED for key, _ in invocation_metadata or ())


class OwnerLookup(Protocol):
    def owner_address(self, message_id: str) -> str | None:
        """HOST:PORT of the node that owns the id's partition when that is another node;
        None when this node owns it or no owner is known (the call is answered here)."""
        ...


class Forwarding(grpc.ServerInterceptor):
    def __init__(self, owners: OwnerLookup) -> None:
        self._owners = owners
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        ids_of = ROUTED.get(details.method)
        if handler is None or ids_of is None or handler.unary_unary is None:
            return handler
        if is_forwarded(details.invocation_metadata):
            return handler  # one hop: answered here
        behaviour = handler.unary_unary
        method = details.method
        metadata = self.passed_on(details.invocation_metadata)

        def forwarding(request, context: grpc.ServicerContext):
            address = self._owner_of(ids_of(request))
            if address is None:
                return behaviour(request, context)
            return self._forward(address, method, request, context, metadata)

        serialize = handler.response_serializer

        def serialize_response(response) -> bytes:
            if isinstance(response, bytes):  # the owner's answer, passed on as it came
                return response
            return serialize(response) if serialize is not None else response

        return grpc.unary_unary_rpc_method_handler(
            forwarding, request_deserializer=handler.request_deserializer,
            response_serializer=serialize_response,
        )  # fmt: skip

    def _owner_of(self, message_ids: list[str]) -> str | None:
        """The one other node every named id belongs to; None when any id is server-made,
        is this node's, or the ids belong to several nodes (answered here)."""
        addresses = set()
        for message_id in message_ids:
            if not message_id:
                return None
            addresses.add(self._owners.owner_address(message_id))
        if len(addresses) != 1:
            return None
        return addresses.pop()

    @staticmethod
    def passed_on(invocation_metadata) -> list[tuple[str, str]]:
        """The caller's metadata as a forwarded call carries it (its token included),
        marked forwarded."""
        metadata = [
            (key, value) for key, value in invocation_metadata or ()
            if not key.startswith(":") and not key.startswith("grpc-") and key != "user-agent"
        ]  # fmt: skip
        metadata.append((FORWARDED, "1"))
        return metadata

    def _forward(self, address: str, method: str, request, context, metadata) -> bytes:
        call = self.channel(address).unary_unary(method)
        remaining = context.time_remaining()
        try:
            return call(request.SerializeToString(), timeout=remaining, metadata=metadata)
        except grpc.RpcError as error:
            context.abort(error.code(), error.details() or "")
            raise  # abort raised already

    def channel(self, address: str) -> grpc.Channel:
        """One channel a peer, kept for the life of the server."""
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = grpc.insecure_channel(address)
            return channel

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()
