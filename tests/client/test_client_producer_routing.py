"""The batching producers against a cluster's map (timerwheel/producer.py, `by_owner`):
a batch goes as one SendBatch per owner the map names (ids the server makes: to the
target), each part's futures settled from its own answer. One node stands for two
owners under two spellings of its address; a planted map names them."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from helpers.waits import WAIT_S

import timerwheel
from timerwheel.partitioning import partition_of
from timerwheel.routing import RouteTable
from timerwheel.v1 import timerwheel_pb2 as pb


def plant(router: RouteTable | None, addresses: list[str]) -> None:
    """A cluster's map as a ClusterMap would answer it: partition p owned at addresses[p]."""
    assert router is not None
    owners = [pb.PartitionOwner(partition=p, node=f"n{p}", address=address, epoch=1)
              for p, address in enumerate(addresses)]  # fmt: skip
    router._single = False
    router._use(pb.ClusterMapResponse(cluster=True, partitions=len(addresses), owners=owners))


def ids_of(partition: int, prefix: str, count: int) -> list[str]:
    found, n = [], 0
    while len(found) < count:
        n += 1
        if partition_of(f"{prefix}-{n}", 2) == partition:
            found.append(f"{prefix}-{n}")
    return found


def owners_of(server) -> list[str]:
    port = server.target.rpartition(":")[2]
    return [f"127.0.0.1:{port}", f"localhost:{port}"]


def test_a_producer_batch_goes_to_each_owner(server):
    owners = owners_of(server)
    first, second = ids_of(0, "sync", 3), ids_of(1, "sync", 3)
    with timerwheel.Client(server.target, timeout_s=WAIT_S) as client:
        client.send("orders", b"first", delay_ms="1h", message_id=second[2])  # map read: one node
        plant(client.router, owners)
        with client.producer(linger_ms=60_000, max_batch=6) as producer:
            futures = [producer.send("orders", b"b", delay_ms="1h", message_id=i)
                       for i in (first[0], second[0], first[1], second[1])]  # fmt: skip
            futures.append(producer.send("orders", b"made", delay_ms="1h"))  # no id: the target
            futures.append(producer.send("orders", b"second", delay_ms="1h", message_id=second[2]))
            results = [f.result(WAIT_S) for f in futures[:5]]
            with pytest.raises(timerwheel.RemoteError) as refused:
                futures[5].result(WAIT_S)
        assert [r.message_id for r in results[:4]] == [first[0], second[0], first[1], second[1]]
        assert results[4].message_id and not any(r.existed for r in results)
        assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
        # owner 0, owner 1 (refused: its messages sent alone), the target's: three parts
        assert producer.batches_sent == 3
        assert client.router is not None and set(client.router._channels) == set(owners)
        assert client.get(second[2]).body == b"first" and client.get(second[1]).body == b"b"


def test_an_async_producer_batch_goes_to_each_owner(server):
    owners = owners_of(server)
    first, second = ids_of(0, "async", 3), ids_of(1, "async", 3)

    async def main() -> None:
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S) as client:
            await client.send("orders", b"first", delay_ms="1h", message_id=second[2])
            plant(client.router, owners)
            async with client.producer(linger_ms=60_000, max_batch=6) as producer:
                futures = [producer.send("orders", b"b", delay_ms="1h", message_id=i)
                           for i in (first[0], second[0], first[1], second[1])]  # fmt: skip
                futures.append(producer.send("orders", b"made", delay_ms="1h"))
                futures.append(
                    producer.send("orders", b"second", delay_ms="1h", message_id=second[2])
                )
                answers = await asyncio.gather(*futures, return_exceptions=True)
            ids = [first[0], second[0], first[1], second[1]]
            assert [a.message_id for a in answers[:4]] == ids  # type: ignore[union-attr]
            assert isinstance(answers[5], timerwheel.RemoteError)
            assert answers[5].code == grpc.StatusCode.ALREADY_EXISTS
            assert producer.batches_sent == 3
            assert client.router is not None and set(client.router._channels) == set(owners)
            assert (await client.get(second[2])).body == b"first"

    asyncio.run(asyncio.wait_for(main(), WAIT_S * 3))
