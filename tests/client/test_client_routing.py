"""The client's routing against a single node (timerwheel/routing.py): the node answers
ClusterMap with a one-node map, and the client then routes nothing, opening no channel
beyond its own; the pieces of the routing and of a split batch's error, alone."""

from __future__ import annotations

import grpc
import pytest

from timerwheel.client import TimerClient
from timerwheel.partitioning import partition_of
from timerwheel.routing import Router, in_batch, reachable, reroutable, spans, split_summary
from timerwheel.v1 import timerwheel_pb2 as pb


def test_a_single_node_answers_a_map_of_one_and_the_client_routes_nothing(server):
    with TimerClient(server.target, timeout_s=10) as client:
        answer = client.cluster_map()
        assert not answer.cluster and answer.partitions == 1
        assert [(o.partition, o.address, o.epoch) for o in answer.owners] == [(0, "", 0)]
        sent = client.send("orders", b"x", delay_ms="1h", message_id="single-1")
        assert client.get(sent.message_id).body == b"x"
        batch = client.send_batch([TimerClient.request("orders", b"y", delay_ms=1, message_id=i)
                                   for i in ("single-2", "single-3")])  # fmt: skip
        assert [r.message_id for r in batch] == ["single-2", "single-3"]
        router = client.router
        assert router is not None and router.single and router._channels == {}
        assert router.owner_stub("single-1") is None
    with TimerClient(server.target, timeout_s=10, routing=False) as plain:
        assert plain.router is None and plain.get("single-1").body == b"x"


class _Error(grpc.RpcError):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self._code, self._details = code, details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details


@pytest.mark.parametrize(
    ("code", "details", "expected"),
    [
        (grpc.StatusCode.UNAVAILABLE, "node gone", True),
        (grpc.StatusCode.FAILED_PRECONDITION,
         "not owner of partition 3: owner is n2 at 127.0.0.1:7072, epoch 4", True),
        (grpc.StatusCode.FAILED_PRECONDITION, "cancelling a fired timer", False),
        (grpc.StatusCode.NOT_FOUND, "no such timer", False),
    ],
)  # fmt: skip
def test_which_answers_send_the_client_back_to_the_map(code, details, expected):
    assert reroutable(_Error(code, details)) is expected


def test_a_split_batch_names_messages_by_their_index_in_the_batch():
    assert spans([0, 1, 2, 5, 7, 8]) == "[0-2, 5, 7-8]" and spans([]) == "[]"
    assert "messages [3] not acknowledged, [0-2] acknowledged" in split_summary([3], [0, 1, 2])
    assert split_summary([0, 1], []) == "no message of the batch was acknowledged"
    exists = grpc.StatusCode.ALREADY_EXISTS
    ids = [f"id-{i}" for i in range(8)]
    named = "messages[1].topic='x y': bad"
    assert in_batch(exists, named, [2, 5], ids) == "messages[5].topic='x y': bad"
    taken = "message_id='id-6': already used"
    assert in_batch(exists, taken, [6], ids) == "messages[6].message_id='id-6': already used"
    assert in_batch(exists, taken, [3, 6], ids) == f"messages[6].{taken}"
    assert in_batch(exists, taken, [0], ids[:1]) == taken
    moved = "not owner of partition 1: owner is n2 at 127.0.0.1:7072, epoch 3"
    assert in_batch(grpc.StatusCode.FAILED_PRECONDITION, moved, [4], ids) == moved


def test_a_scoped_id_goes_where_the_id_the_client_sent_goes():
    """Decision 0012: a scoped token's id X is stored as <scope>/X; forwarding and routing
    go by X, so the owner must find <scope>/X in X's partition."""
    for message_id in ("order-1", "order-2", "x", "series-9"):
        for scope in ("orders.", "billing.,invoices.", "~0123456789abcdef"):
            for count in (1, 6, 64):
                scoped = f"{scope}/{message_id}"
                assert partition_of(scoped, count) == partition_of(message_id, count)
                assert partition_of(f"{scoped}#3", count) == partition_of(message_id, count)
    made = "0123456789ABCDEF0123456789ABCDEF.p5"
    assert partition_of(made, 6) == 5 and partition_of(f"orders./{made}", 6) == 5


def test_a_wildcard_address_is_not_routed_to():
    """A node bound to 0.0.0.0 advertises it: dialled, it would reach the client's own
    machine. The client treats such a partition as one of no known owner."""
    assert reachable("10.0.0.7:7071") and reachable("[fd00::7]:7071") and reachable("n1:7071")
    assert not any(map(reachable, ["0.0.0.0:7071", "[::]:7071", ":7071", ""]))
    router = Router(lambda: None, lambda address: None, 1.0)  # type: ignore[arg-type,return-value]
    owners = [
        pb.PartitionOwner(partition=0, node="n1", address="10.0.0.7:7071", epoch=2),
        pb.PartitionOwner(partition=1, node="n2", address="0.0.0.0:7072", epoch=3),
    ]
    router._use(pb.ClusterMapResponse(cluster=True, partitions=2, owners=owners))
    assert router._addresses == ["10.0.0.7:7071", ""] and not router.single
