"""Subscribe, Ack and Nack across a cluster's nodes (cluster mode, docs/cluster.md).

Each node delivers the partitions it owns. So that a consumer may connect to any one node
and still get every partition's messages, a Subscribe that a node receives from a client
is fanned in: the node serves its own partitions from its hub and relays a Subscribe of
the same topic from every other live node (each relayed stream marked forwarded, so it is
served there from that node's hub only), merging all of them into the client's stream.
A node that joins or comes back is subscribed to within a second; a relayed stream that
fails is opened again then; one that ends cleanly (a release drained it) is not.

An Ack or Nack names ids: each id goes to the node whose stream delivered it (its hub
holds it in flight), this node's own deliveries included, remembered here for up to
`REMEMBERED` messages; an id not remembered goes to the node that owns its partition now
(this node's hub, or the owner's, forwarded once). A message this node delivered is
settled here even when its partition has moved since: the new owner's hub never had it
in flight, and sent there the ack would leave it in flight here, redelivered at each ack
timeout and holding a slot of the subscriber's max_in_flight for ever. The counts come
back summed. Each relayed stream has the client's `max_in_flight` of its own, so a
consumer can hold up to that many messages per node.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from typing import Any, Protocol

import grpc

from timerwheel.server.forwarding import SERVICE, Forwarding, OwnerLookup, is_forwarded
from timerwheel.v1 import timerwheel_pb2 as pb

SUBSCRIBE = SERVICE + "Subscribe"
ACK = SERVICE + "Ack"
NACK = SERVICE + "Nack"
PEERS_EVERY_S = 1.0  # how often a fanned-in stream looks for nodes it does not relay yet
IDLE_S = 0.25  # how long the merged stream waits before it looks at its state again
REMEMBERED = 200_000  # deliveries whose node is remembered for their Ack or Nack
LOCAL = ""  # remembered as delivered by this node's own hub


class PeerLookup(OwnerLookup, Protocol):
    def peer_addresses(self) -> list[str]:
        """HOST:PORT of every other live node."""
        ...


class FanIn(grpc.ServerInterceptor):
    def __init__(self, peers: PeerLookup, channels: Forwarding) -> None:
        self._peers = peers
        self._channels = channels
        self._delivered_by: dict[str, str] = {}  # message id -> the delivering node (LOCAL)
        self._lock = threading.Lock()

    def _remember(self, batch: bytes | pb.DeliveryBatch, address: str) -> None:
        if isinstance(batch, bytes):  # relayed as the peer sent it
            batch = pb.DeliveryBatch.FromString(batch)
        ids = [d.message_id for d in batch.deliveries]
        with self._lock:
            for message_id in ids:
                self._delivered_by[message_id] = address
            while len(self._delivered_by) > REMEMBERED:  # the oldest go first (insertion order)
                del self._delivered_by[next(iter(self._delivered_by))]

    def _node_of(self, message_id: str) -> str | None:
        with self._lock:
            address = self._delivered_by.pop(message_id, None)
        if address == LOCAL:
            return None
        return address if address is not None else self._peers.owner_address(message_id)

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        method = details.method
        if handler is None or method not in (SUBSCRIBE, ACK, NACK):
            return handler
        if is_forwarded(details.invocation_metadata):
            return handler  # a relayed call: served from this node's hub only
        metadata = Forwarding.passed_on(details.invocation_metadata)
        serialize = handler.response_serializer

        def serialize_response(response) -> bytes:
            if isinstance(response, bytes):  # a relayed batch, as the peer sent it
                return response
            return serialize(response) if serialize is not None else response

        if method == SUBSCRIBE:
            behaviour = handler.unary_stream

            def subscribe(request, context):
                return self._fan_in(behaviour, request, context, metadata)

            return grpc.unary_stream_rpc_method_handler(
                subscribe, request_deserializer=handler.request_deserializer,
                response_serializer=serialize_response,
            )  # fmt: skip
        settle = handler.unary_unary
        merge = _merge_acks if method == ACK else _merge_nacks
        response_type = pb.AckResponse if method == ACK else pb.NackResponse

        def routed(request, context):
            return self._route(method, settle, request, context, metadata, merge, response_type)

        return grpc.unary_unary_rpc_method_handler(
            routed, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )  # fmt: skip

    # -- Ack, Nack: each id to its partition's owner -------------------------------------
    def _route(self, method, settle, request, context, metadata, merge, response_type):
        by_owner: dict[str | None, list[str]] = {}
        for message_id in request.message_ids:
            by_owner.setdefault(self._node_of(message_id), []).append(message_id)
        if list(by_owner) in ([None], []):
            return settle(request, context)
        answers = []
        for address, ids in by_owner.items():
            part = type(request)()
            part.CopyFrom(request)
            del part.message_ids[:]
            part.message_ids.extend(ids)
            if address is None:
                answers.append(settle(part, context))
                continue
            call = self._channels.channel(address).unary_unary(
                method, response_deserializer=response_type.FromString
            )
            try:
                answers.append(
                    call(part.SerializeToString(), timeout=context.time_remaining(),
                         metadata=metadata)
                )  # fmt: skip
            except grpc.RpcError as error:
                context.abort(error.code(), error.details() or "")
        return merge(answers)

    # -- Subscribe: this node's hub and every other node's, merged ------------------------
    def _fan_in(self, behaviour, request, context, metadata) -> Iterator[Any]:
        merged: queue.Queue = queue.Queue(maxsize=64)
        done = threading.Event()
        relayed: dict[str, grpc.Future | None] = {}  # address -> its call (None: ended OK)
        lock = threading.Lock()
        payload = request.SerializeToString()
        local = behaviour(request, context)

        def pump(source: Iterator[Any], address: str | None) -> None:
            try:
                for item in source:
                    self._remember(item, LOCAL if address is None else address)
                    while not done.is_set():
                        try:
                            merged.put(item, timeout=IDLE_S)
                            break
                        except queue.Full:
                            continue
                    if done.is_set():
                        return
                ended_ok = True
            except grpc.RpcError:
                ended_ok = False  # the peer went away: opened again when it is back
            if address is None:
                merged.put(_LOCAL_ENDED)
                return
            with lock:
                if ended_ok:
                    relayed[address] = None
                else:
                    relayed.pop(address, None)

        def open_peers() -> None:
            for address in self._peers.peer_addresses():
                with lock:
                    if address in relayed or done.is_set():
                        continue
                    call = self._channels.channel(address).unary_stream(SUBSCRIBE)(
                        payload, metadata=metadata
                    )
                    relayed[address] = call
                threading.Thread(
                    target=pump, args=(call, address), name="fan-in", daemon=True
                ).start()

        threading.Thread(target=pump, args=(local, None), name="fan-in-local", daemon=True).start()
        next_look = 0.0
        try:
            while context.is_active():
                now = time.monotonic()
                if now >= next_look:
                    next_look = now + PEERS_EVERY_S
                    open_peers()
                try:
                    item = merged.get(timeout=IDLE_S)
                except queue.Empty:
                    continue
                if item is _LOCAL_ENDED:
                    return
                yield item
        finally:
            done.set()
            with lock:
                calls = [call for call in relayed.values() if call is not None]
            for call in calls:
                call.cancel()
            # the local stream ends by itself: its subscriber closes with the call's context


_LOCAL_ENDED = object()


def _merge_acks(answers: list[pb.AckResponse]) -> pb.AckResponse:
    return pb.AckResponse(acked=sum(answer.acked for answer in answers))


def _merge_nacks(answers: list[pb.NackResponse]) -> pb.NackResponse:
    return pb.NackResponse(
        nacked=sum(answer.nacked for answer in answers),
        dead_lettered=sum(answer.dead_lettered for answer in answers),
    )
