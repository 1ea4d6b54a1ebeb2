"""Calls on another node's partition, passed on to its owner (cluster mode, docs/cluster.md).

A unary TimerService call that names message ids (Send and SendBatch with client-chosen
ids, Get, Cancel, Reschedule, PauseSeries, ResumeSeries) whose partition another node owns
is passed on as it came: its bytes, its metadata (the caller's token included: the owner
checks it again) and what is left of its deadline; the owner's answer, or its error, goes
back as it is. So a plain gRPC client (grpcurl) can call any node.

One hop only: a call that arrives forwarded (`timerwheel-forwarded` in its metadata) is
answered where it lands, "not owner" if ownership moved meanwhile, and the caller retries.
A client that routes by the cluster map (`timerwheel.Client`) marks its calls
`timerwheel-direct`: they are answered where they land too, so a stale map draws the
"not owner" answer that names the owner, and the client refreshes its map.

A SendBatch whose client-chosen ids belong to several owners is split (decision 0010):
the messages of this node's partitions (and those without an id) are sent here, each
other owner's messages in one forwarded call, all at once, after the whole batch is
validated here (so a bad field is refused before anything is stored, named by its index
in the batch). The answer comes when every part is answered: the results in the order
sent when all succeeded; otherwise the error of the first failing part in message order,
its indices those of the whole batch, saying which messages were acknowledged (stored
and durable) and which were not. Each part is atomic on its owner; the batch as a whole
is not, and a retry of the same batch is idempotent (client ids).
The interceptor is the innermost, after the request guard: a call is authenticated here
before it costs the owner anything. Calls between nodes go over TLS when the node serves
TLS (`timerwheel.server.peers`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, Protocol

import grpc

from timerwheel.retries import RETRY_AFTER_KEY
from timerwheel.routing import DIRECT, in_batch, split_summary
from timerwheel.server.errors import rpc_errors
from timerwheel.server.send_requests import specs_from_proto
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import SendSpec

FORWARDED = "timerwheel-forwarded"
SERVICE = "/timerwheel.v1.TimerService/"
SEND_BATCH = SERVICE + "SendBatch"

# method -> the ids a request names (an empty id: a server-made one, decided here)
ROUTED: dict[str, Callable[[Any], list[str]]] = {
    SERVICE + "Send": lambda request: [request.message_id],
    SERVICE + "SendBatch": lambda request: [m.message_id for m in request.messages],
    SERVICE + "Get": lambda request: [request.message_id],
    SERVICE + "Cancel": lambda request: [request.message_id],
    SERVICE + "Reschedule": lambda request: [request.message_id],
    SERVICE + "PauseSeries": lambda request: [request.series_id],
    SERVICE + "ResumeSeries": lambda request: [request.series_id],
}


def is_forwarded(invocation_metadata) -> bool:
    """The call came from another node (one hop: it is answered where it lands)."""
    return any(key == FORWARDED for key, _ in invocation_metadata or ())


def is_direct(invocation_metadata) -> bool:
    """The client routed the call itself and asks that it be answered here."""
    return any(key == DIRECT for key, _ in invocation_metadata or ())


class OwnerLookup(Protocol):
    def owner_address(self, message_id: str) -> str | None:
        """HOST:PORT of the node that owns the id's partition when that is another node;
        None when this node owns it or no owner is known (the call is answered here)."""
        ...


class Forwarding(grpc.ServerInterceptor):
    def __init__(
        self, owners: OwnerLookup, check_sends: Callable[[list[SendSpec]], object] | None = None,
        credentials: grpc.ChannelCredentials | None = None,
    ) -> None:  # fmt: skip
        """`check_sends`: validates a whole batch before it is split (the node's
        `ClusterApi.check_sends`); None: each part is validated by its owner only.
        `credentials`: TLS for the calls to other nodes (timerwheel.server.peers); None:
        plain channels."""
        self._owners = owners
        self._check_sends = check_sends
        self._credentials = credentials
        self._channels: dict[str, grpc.Channel] = {}
        self._lock = threading.Lock()

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        ids_of = ROUTED.get(details.method)
        if handler is None or ids_of is None or handler.unary_unary is None:
            return handler
        if is_forwarded(details.invocation_metadata) or is_direct(details.invocation_metadata):
            return handler  # one hop, or routed by the client: answered here
        behaviour = handler.unary_unary
        method = details.method
        metadata = self.passed_on(details.invocation_metadata)

        def forwarding(request, context: grpc.ServicerContext):
            if method == SEND_BATCH:
                groups = self._groups(request.messages)
                if len(groups) > 1:
                    return self._split(behaviour, request, context, metadata, groups)
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

    def _groups(self, messages) -> dict[str | None, list[int]]:
        """A batch's message indices by owner address (None: answered here)."""
        groups: dict[str | None, list[int]] = {}
        owner_address = self._owners.owner_address
        for index, message in enumerate(messages):
            address = owner_address(message.message_id) if message.message_id else None
            groups.setdefault(address, []).append(index)
        return groups

    def _split(self, behaviour, request, context, metadata, groups) -> pb.SendBatchResponse:
        """A SendBatch of several owners: this node's part here, each other owner's part
        forwarded, all at once; all answered, or the first failing part's error."""
        if self._check_sends is not None:
            with rpc_errors(context, "SendBatch"):  # before anything is stored anywhere
                self._check_sends(specs_from_proto(request.messages))
        messages = request.messages
        calls = {}
        for address, indices in groups.items():
            if address is None:
                continue
            part = pb.SendBatchRequest(messages=[messages[i] for i in indices])
            call = self.channel(address).unary_unary(
                SEND_BATCH, request_serializer=pb.SendBatchRequest.SerializeToString,
                response_deserializer=pb.SendBatchResponse.FromString,
            )  # fmt: skip
            calls[address] = call.future(part, timeout=context.time_remaining(), metadata=metadata)
        answers: dict[str | None, pb.SendBatchResponse | _PartFailed] = {}
        if None in groups:
            part = pb.SendBatchRequest(messages=[messages[i] for i in groups[None]])
            try:
                answers[None] = behaviour(part, _PartContext(context))
            except _PartFailed as failed:
                answers[None] = failed
        for address, future in calls.items():
            try:
                answers[address] = future.result()
            except grpc.RpcError as error:
                answers[address] = _PartFailed(error.code(), error.details() or "", address)
        failed = [a for a in groups if isinstance(answers[a], _PartFailed)]
        if failed:
            first = min(failed, key=lambda a: groups[a][0])
            failure = answers[first]
            assert isinstance(failure, _PartFailed)
            unacked = sorted(i for a in failed for i in groups[a])
            acked = sorted(i for a in groups if a not in failed for i in groups[a])
            where = f"the node at {failure.address}" if failure.address else "this node"
            ids = [message.message_id for message in messages]
            details = in_batch(failure.code, failure.details, groups[first], ids)
            context.abort(
                failure.code,
                f"{details} (SendBatch split by partition owner: the part sent to {where} "
                f"failed; {split_summary(unacked, acked)})",
            )
        response = pb.SendBatchResponse()
        results: list[pb.SendResponse | None] = [None] * len(messages)
        for address, indices in groups.items():
            answer = answers[address]
            assert isinstance(answer, pb.SendBatchResponse)
            for index, result in zip(indices, answer.results, strict=True):
                results[index] = result
        response.results.extend(results)
        return response

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
            # The owner's refusal that stored nothing stays one (the whole call went there)
            passed = [(k, v) for k, v in error.trailing_metadata() or () if k == RETRY_AFTER_KEY]
            if passed:
                context.set_trailing_metadata(passed)
            context.abort(error.code(), error.details() or "")
            raise  # abort raised already

    def channel(self, address: str) -> grpc.Channel:
        """One channel a peer, kept for the life of the server."""
        with self._lock:
            channel = self._channels.get(address)
            if channel is None:
                channel = self._channels[address] = (
                    grpc.insecure_channel(address) if self._credentials is None
                    else grpc.secure_channel(address, self._credentials)
                )  # fmt: skip
            return channel

    def close(self) -> None:
        with self._lock:
            for channel in self._channels.values():
                channel.close()
            self._channels.clear()


class _PartFailed(Exception):
    """A part of a split batch failed: its status code and message, and where."""

    def __init__(self, code: grpc.StatusCode, details: str, address: str = "") -> None:
        super().__init__(details)
        self.code = code
        self.details = details
        self.address = address


class _PartContext:
    """The call's context for this node's part of a split batch: an abort becomes a
    `_PartFailed`, so the other parts are still awaited before the call is answered."""

    def __init__(self, context: grpc.ServicerContext) -> None:
        self._context = context

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        raise _PartFailed(code, details)

    def set_trailing_metadata(self, metadata) -> None:
        """Dropped: a part's trailers are not the call's. A retry-after says the call
        stored nothing, and the other parts of a split batch may have been stored."""

    def __getattr__(self, name: str) -> Any:
        return getattr(self._context, name)
