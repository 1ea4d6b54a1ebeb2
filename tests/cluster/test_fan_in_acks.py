"""Where a fanned-in stream's Acks go (server.fan_in): a message this node delivered from
its own hub is settled here even after its partition moved to another node, since only
this hub holds it in flight. Driven through the interceptor's own paths with fakes for the
peers and the servicer: no processes, no network."""

from __future__ import annotations

from timerwheel.server.fan_in import ACK, FanIn
from timerwheel.v1 import timerwheel_pb2 as pb

ELSEWHERE = "10.9.9.9:1"


class Peers:
    """Every partition is owned by another node now (the message's has moved there)."""

    def owner_address(self, message_id: str) -> str | None:
        return ELSEWHERE

    def peer_addresses(self) -> list[str]:
        return []  # nothing relayed: the stream is this node's hub only


class Context:
    def is_active(self) -> bool:
        return True

    def time_remaining(self) -> float:
        return 5.0


class Channels:
    """Any forwarded call is recorded and answered as the owner would (it never had the
    message in flight: nothing acked there)."""

    def __init__(self) -> None:
        self.forwarded: list[tuple[str, list[str]]] = []

    def channel(self, address: str):
        channels = self

        class Channel:
            def unary_unary(self, method, response_deserializer):
                def call(payload, timeout, metadata):
                    ids = list(pb.AckRequest.FromString(payload).message_ids)
                    channels.forwarded.append((address, ids))
                    return pb.AckResponse(acked=0)

                return call

        return Channel()


def test_an_ack_of_a_message_this_node_delivered_is_settled_here_after_a_move():
    channels = Channels()
    fan_in = FanIn(Peers(), channels)  # type: ignore[arg-type]
    local = pb.DeliveryBatch(deliveries=[pb.Delivery(message_id="A1.p3")])

    def subscribe(request, context):  # this node's hub: one batch, then the stream idles
        yield local

    stream = fan_in._fan_in(subscribe, pb.SubscribeRequest(topic="t"), Context(), [])
    assert next(stream) == local
    settled: list[list[str]] = []

    def settle(request, context):  # this node's hub
        settled.append(list(request.message_ids))
        return pb.AckResponse(acked=len(request.message_ids))

    def route(ids: list[str]) -> pb.AckResponse:
        request = pb.AckRequest(topic="t", message_ids=ids)
        return fan_in._route(ACK, settle, request, Context(), [], _sum, pb.AckResponse)

    answer = route(["A1.p3", "B2.p3"])  # B2 never came through this node's stream
    stream.close()
    assert settled == [["A1.p3"]]
    assert channels.forwarded == [(ELSEWHERE, ["B2.p3"])]
    assert answer.acked == 1


def _sum(answers: list[pb.AckResponse]) -> pb.AckResponse:
    return pb.AckResponse(acked=sum(a.acked for a in answers))
