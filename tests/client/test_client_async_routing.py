"""`timerwheel.AsyncClient`'s routing (timerwheel/aio_routing.py) against a single node:
one ClusterMap call, then nothing routed and no channel opened beyond its own; and, with
a cluster's map planted by hand, the same decisions as the blocking client's: direct
calls at the owner the map names, a batch of two "owners" split into two calls at once
with the split's all-or-error answer, and an owner that is away sending the client back
to the map once."""

from __future__ import annotations

import asyncio
import socket

import grpc
import pytest
from helpers.waits import WAIT_S

import timerwheel
from timerwheel.aio_routing import AsyncRouter
from timerwheel.partitioning import partition_of
from timerwheel.v1 import timerwheel_pb2 as pb


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, WAIT_S * 3))


def request(message_id: str, body: bytes = b"b") -> pb.SendRequest:
    return timerwheel.AsyncClient.request("orders", body, delay_ms="1h", message_id=message_id)


def plant(router: AsyncRouter, addresses: list[str]) -> None:
    """A cluster's map as if a ClusterMap had answered it: partition p owned at
    addresses[p]."""
    owners = [
        pb.PartitionOwner(partition=p, node=f"n{p}", address=address, epoch=1)
        for p, address in enumerate(addresses)
    ]
    answer = pb.ClusterMapResponse(cluster=True, partitions=len(addresses), owners=owners)
    router._use(answer)
    assert not router.single


def ids_of(partition: int, partitions: int, prefix: str, count: int) -> list[str]:
    found: list[str] = []
    n = 0
    while len(found) < count:
        n += 1
        if partition_of(f"{prefix}-{n}", partitions) == partition:
            found.append(f"{prefix}-{n}")
    return found


def test_a_single_node_costs_one_map_call_and_routes_nothing(server):
    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            router = client.router
            assert router is not None and router.fetches == 0  # not read when built
            sent = await client.send("orders", b"x", delay_ms="1h", message_id="single-1")
            assert (await client.get(sent.message_id)).body == b"x"
            assert router.single and router.fetches == 1  # answered: cluster false
            batch = await client.send_batch([request("single-2"), request("single-3")])
            assert [r.message_id for r in batch] == ["single-2", "single-3"]
            await client.reschedule("single-2", delay_ms="2h")
            assert await client.cancel("single-3") is timerwheel.State.CANCELLED
            assert router._channels == {} and await router.owner_stub("single-1") is None
            assert not await router.refresh()  # decided: never asked again
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S, routing=False) as plain:
            assert plain.router is None
            assert (await plain.get("single-1")).body == b"x"

    run(main())


def test_calls_go_to_the_owner_the_map_names_and_a_batch_is_split(server):
    """Two spellings of the one node's address stand for two owners: each id's call goes
    to its partition's "owner", a batch of both goes as two calls at once, and one part
    refused fails the batch naming what was acknowledged (the single node ignores the
    direct mark: it owns everything)."""
    port = server.target.rpartition(":")[2]
    owners = [f"127.0.0.1:{port}", f"localhost:{port}"]

    async def main():
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            router = client.router
            assert router is not None
            plant(router, owners)
            asked: list[str] = []
            stub_at = router.stub_at
            router.stub_at = lambda address: asked.append(address) or stub_at(address)  # type: ignore[method-assign]
            first, second = ids_of(0, 2, "split", 3), ids_of(1, 2, "split", 3)
            await client.send("orders", b"one", delay_ms="1h", message_id=first[0])
            assert asked == [owners[0]] and router.address_of(second[0]) == owners[1]
            ids = [first[1], second[0], first[2], second[1]]
            asked.clear()
            results = await client.send_batch([request(i) for i in ids])
            assert [r.message_id for r in results] == ids and not any(r.existed for r in results)
            # the first id's owner looked up, then one part per owner
            assert asked[0] == owners[0] and sorted(asked[1:]) == sorted(owners)
            assert set(router._channels) == set(owners)

            taken = second[2]
            await client.send("orders", b"first", delay_ms="1h", message_id=taken)
            fresh = [*ids_of(0, 2, "partial", 2), taken]
            with pytest.raises(timerwheel.RemoteError) as refused:
                await client.send_batch([request(i, b"second") for i in fresh])
            assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
            assert f"messages[2].message_id='{taken}'" in refused.value.details
            assert "messages [2] not acknowledged, [0-1] acknowledged" in refused.value.details
            assert [(await client.get(i)).body for i in fresh] == [b"second", b"second", b"first"]
            assert router.fetches == 0  # planted; no answer sent the client back to the map

    run(main())


def test_an_owner_that_is_away_sends_the_client_back_to_the_map_once(server):
    """A map naming an address where nothing answers (a node gone): the direct call fails
    UNAVAILABLE, the map is read again (the one node: cluster false) and the call made
    at the target."""
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        gone = f"127.0.0.1:{closed.getsockname()[1]}"

        async def main():
            async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
                router = client.router
                assert router is not None
                await client.send("orders", b"kept", delay_ms="1h", message_id="away-1")
                router._single = False
                plant(router, [gone])
                assert (await client.get("away-1")).body == b"kept"
                assert router.single and router.fetches == 2  # the first call's, this one

                router._single = False
                plant(router, [gone])
                batch = await client.send_batch([request("away-2"), request("away-3")])
                assert [r.message_id for r in batch] == ["away-2", "away-3"]
                assert router.single and router.fetches == 3

        run(main())
