"""ClusterMap, "not owner" answers, SendBatch split by owner and the client's routing, over a
real three-node cluster on a real JetStream cluster (docs/cluster.md, "ClusterMap and
routing"; decision 0010).

One cluster serves the module: each test uses ids of its own prefix."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from helpers.cluster_nodes import ClusterRun

from timerwheel.aio import AsyncClient
from timerwheel.client import RemoteError, TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.common import State
from timerwheel.routing import DIRECT_METADATA
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

CALL_S = 20


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    with ClusterRun(tmp_path_factory.mktemp("routing")) as cluster:
        owners = {p: name for name, parts in cluster.wait_all_owned().items() for p in parts}
        maps_agree(cluster, owners)
        yield cluster


def maps_agree(run: ClusterRun, owners: dict[int, str]) -> dict[str, pb.ClusterMapResponse]:
    """Every node's map once they all name `owners` (each node's copy is as it last read
    the leases: after a hand-off it may lag by a renewal), or as they are after 20 s."""
    deadline = time.monotonic() + 20
    while True:
        maps = {}
        for name, server in run.servers.items():
            with TimerClient(server.target, timeout_s=CALL_S) as client:
                maps[name] = client.cluster_map()
        seen = [{o.partition: o.node for o in answer.owners} for answer in maps.values()]
        if all(view == owners for view in seen) or time.monotonic() > deadline:
            return maps
        time.sleep(0.2)


def ids_in_every_partition(partitions: int, prefix: str, per_partition: int = 2) -> list[str]:
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(ids) < per_partition for ids in found.values()):
        n += 1
        ids = found[partition_of(f"{prefix}-{n}", partitions)]
        if len(ids) < per_partition:
            ids.append(f"{prefix}-{n}")
    return [message_id for ids in found.values() for message_id in ids]


def owners_by_partition(run: ClusterRun) -> dict[int, str]:
    return {p: name for name, parts in run.wait_all_owned().items() for p in parts}


def request(message_id: str, body: bytes = b"b", topic: str = "orders") -> pb.SendRequest:
    return TimerClient.request(topic, body, delay_ms="1h", message_id=message_id)


def stub(target: str) -> tuple[grpc.Channel, pb_grpc.TimerServiceStub]:
    channel = grpc.insecure_channel(target)
    return channel, pb_grpc.TimerServiceStub(channel)


def state_of(target: str, message_id: str) -> str:
    """The timer's state name as the cluster answers it, or NOT_FOUND."""
    with TimerClient(target, timeout_s=CALL_S) as client:
        try:
            return client.get(message_id).state.name
        except RemoteError as error:
            assert error.code == grpc.StatusCode.NOT_FOUND, error
            return "NOT_FOUND"


def test_every_node_answers_the_same_map(run):
    owners = owners_by_partition(run)
    targets = {name: server.target for name, server in run.servers.items()}
    maps = maps_agree(run, owners)
    for name, answer in maps.items():
        assert answer.cluster and answer.partitions == run.partitions
        assert answer.node == name and answer.address == targets[name]
        assert [o.partition for o in answer.owners] == list(range(run.partitions))
        for owner in answer.owners:
            assert owner.node == owners[owner.partition], (name, owner)
            assert owner.holder.split("/")[0] == owner.node
            assert owner.address == targets[owner.node] and owner.epoch > 0
    epochs = {tuple((o.partition, o.epoch) for o in answer.owners) for answer in maps.values()}
    assert len(epochs) == 1  # one epoch per partition, on every node


def test_a_direct_call_to_another_node_names_the_owner(run):
    """A call marked direct (the routing client's) is answered where it lands: a node that
    does not own the id's partition answers FAILED_PRECONDITION naming the owner."""
    owners = owners_by_partition(run)
    with TimerClient(run.servers["n1"].target, timeout_s=CALL_S) as client:
        epochs = {o.partition: o.epoch for o in client.cluster_map().owners}
    message_id = next(
        i for i in ids_in_every_partition(run.partitions, "direct")
        if owners[partition_of(i, run.partitions)] != "n1"
    )  # fmt: skip
    partition = partition_of(message_id, run.partitions)
    owner = owners[partition]
    channel, service = stub(run.servers["n1"].target)
    with channel:
        with pytest.raises(grpc.RpcError) as refused:
            service.Get(
                pb.GetRequest(message_id=message_id), timeout=CALL_S, metadata=DIRECT_METADATA
            )
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert refused.value.details() == (
            f"not owner of partition {partition}: owner is {owner} at "
            f"{run.servers[owner].target}, epoch {epochs[partition]}"
        )
        # without the mark it is forwarded: NOT_FOUND from the owner
        with pytest.raises(grpc.RpcError) as forwarded:
            service.Get(pb.GetRequest(message_id=message_id), timeout=CALL_S)
        assert forwarded.value.code() == grpc.StatusCode.NOT_FOUND


def test_a_batch_of_every_owner_is_split_by_the_node_that_receives_it(run):
    ids = ids_in_every_partition(run.partitions, "split")
    messages = [request(i) for i in ids]
    messages.insert(3, TimerClient.request("orders", b"server-made", delay_ms="1h"))
    channel, service = stub(run.servers["n2"].target)  # a plain client: no routing
    with channel:
        answer = service.SendBatch(pb.SendBatchRequest(messages=messages), timeout=CALL_S)
    assert [r.message_id for r in answer.results][:3] == ids[:3]
    assert [r.message_id for r in answer.results][4:] == ids[3:]
    assert answer.results[3].message_id and not any(r.existed for r in answer.results)
    for message_id in [r.message_id for r in answer.results]:
        assert state_of(run.servers["n3"].target, message_id) == "SCHEDULED"


def test_a_split_batch_that_fails_in_part_says_what_was_acknowledged(run):
    """Each owner's part is atomic; the batch is not. A conflict on one owner fails the
    call with that owner's error, indices of the whole batch, and says which messages were
    acknowledged: they are stored, the failing part's are not."""
    owners = owners_by_partition(run)
    ids = ids_in_every_partition(run.partitions, "partial")
    by_owner = {name: [i for i in ids if owners[partition_of(i, run.partitions)] == name]
                for name in run.servers}  # fmt: skip
    receiver = "n1"
    victim = next(name for name in by_owner if name != receiver and by_owner[name])
    taken = by_owner[victim][0]
    with TimerClient(run.servers[victim].target, timeout_s=CALL_S) as client:
        client.send("orders", b"first", delay_ms="1h", message_id=taken)
    index = ids.index(taken)
    channel, service = stub(run.servers[receiver].target)
    with channel, pytest.raises(grpc.RpcError) as refused:
        service.SendBatch(
            pb.SendBatchRequest(messages=[request(i, b"second") for i in ids]), timeout=CALL_S
        )
    assert refused.value.code() == grpc.StatusCode.ALREADY_EXISTS
    details = refused.value.details()
    assert f"messages[{index}].message_id='{taken}'" in details, details
    assert "SendBatch split by partition owner" in details and "not acknowledged" in details
    for message_id in ids:
        expected = "NOT_FOUND" if message_id in by_owner[victim] else "SCHEDULED"
        if message_id == taken:
            expected = "SCHEDULED"  # the first send's
        assert state_of(run.servers[receiver].target, message_id) == expected, message_id

    # a bad field is refused before any part is sent: nothing stored
    bad = ids_in_every_partition(run.partitions, "invalid")
    messages = [request(i) for i in bad]
    messages[4] = request(bad[4], topic="bad topic!")
    channel, service = stub(run.servers[receiver].target)
    with channel, pytest.raises(grpc.RpcError) as invalid:
        service.SendBatch(pb.SendBatchRequest(messages=messages), timeout=CALL_S)
    assert invalid.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "messages[4].topic" in invalid.value.details()
    assert {state_of(run.servers["n2"].target, i) for i in bad} == {"NOT_FOUND"}


def test_the_client_routes_each_call_to_the_owner(run):
    owners = owners_by_partition(run)
    ids = ids_in_every_partition(run.partitions, "routed")
    with TimerClient(run.servers["n1"].target, timeout_s=CALL_S) as client:
        for message_id in ids[: run.partitions]:
            assert not client.send("orders", b"b", delay_ms="1h", message_id=message_id).existed
        router = client.router
        assert router is not None and router.fetches == 1 and not router.single
        for message_id in ids:
            address = router.address_of(message_id)
            assert address == run.servers[owners[partition_of(message_id, run.partitions)]].target
        batch = client.send_batch([request(i) for i in ids[run.partitions :]])
        assert [r.message_id for r in batch] == ids[run.partitions :]
        assert all(client.get(i).state is State.SCHEDULED for i in ids)
        later = client.reschedule(ids[0], delay_ms="2h")
        assert client.get(ids[0]).deliver_at_ms == later
        assert client.cancel(ids[1]) is State.CANCELLED
        assert router.fetches == 1  # no answer sent it back to the map

        # a stale map (every partition on n1): "not owner", the map read again, retried
        stale = run.servers["n1"].target
        router._addresses = [stale] * run.partitions
        foreign = [i for i in ids if owners[partition_of(i, run.partitions)] != "n1"]
        assert client.get(foreign[0]).state is State.SCHEDULED
        assert router.fetches == 2
        router._addresses = [stale] * run.partitions
        untouched = ids[2:]  # the first two were rescheduled and cancelled
        resent = client.send_batch([request(i) for i in untouched])  # idempotent: all existed
        assert [r.message_id for r in resent] == untouched and all(r.existed for r in resent)
        assert router.fetches == 3

        # a series on another node: paused and resumed at its owner, marked direct (a
        # stale map sends the resume to n1, which answers "not owner": read again)
        series_id = next(i for i in ids_in_every_partition(run.partitions, "routed-series")
                         if owners[partition_of(i, run.partitions)] != "n1")  # fmt: skip
        client.send("orders", b"s", delay_ms="1h", message_id=series_id,
                    repeat=pb.Repeat(every_ms=3_600_000))  # fmt: skip
        assert client.pause_series(series_id).changed
        assert router.fetches == 3
        router._addresses = [stale] * run.partitions
        assert client.resume_series(series_id).changed
        assert router.fetches == 4

        # a batch of several owners that fails in part: the client says which were acked
        fresh = ids_in_every_partition(run.partitions, "routed-partial")
        taken = next(i for i in fresh if owners[partition_of(i, run.partitions)] == "n3")
        client.send("orders", b"first", delay_ms="1h", message_id=taken)
        with pytest.raises(RemoteError) as refused:
            client.send_batch([request(i, b"second") for i in fresh])
        assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
        assert "not acknowledged" in refused.value.details
        n3_ids = {i for i in fresh if owners[partition_of(i, run.partitions)] == "n3"}
        for message_id in fresh:
            expected = "SCHEDULED" if message_id == taken or message_id not in n3_ids else None
            assert state_of(stale, message_id) == (expected or "NOT_FOUND"), message_id


def test_the_async_client_routes_each_call_to_the_owner(run):
    """`timerwheel.AsyncClient` routes as `Client` does: its calls are marked direct, so one
    landing anywhere but at the owner would be answered "not owner" and send it back to
    the map; the map is read once while it is right, once more per call after it is made
    stale, and a batch of every owner goes as one call per owner."""
    owners = owners_by_partition(run)
    ids = ids_in_every_partition(run.partitions, "async-routed")
    targets = {name: server.target for name, server in run.servers.items()}
    stale = targets["n1"]

    async def main() -> None:
        async with AsyncClient(stale, timeout_s=CALL_S) as client:
            router = client.router
            assert router is not None
            for message_id in ids[: run.partitions]:
                sent = await client.send("orders", b"b", delay_ms="1h", message_id=message_id)
                assert not sent.existed
            assert router.fetches == 1 and not router.single
            for message_id in ids:
                owner = owners[partition_of(message_id, run.partitions)]
                assert router.address_of(message_id) == targets[owner]
            asked: list[str] = []
            stub_at = router.stub_at
            router.stub_at = lambda address: asked.append(address) or stub_at(address)  # type: ignore[method-assign]
            rest = ids[run.partitions :]
            batch = await client.send_batch([request(i) for i in rest])
            assert [r.message_id for r in batch] == rest and not any(r.existed for r in batch)
            # the first id's owner looked up, then one part per owner, each once
            parts = asked[1:]
            assert sorted(parts) == sorted({targets[owners[p]] for p in range(run.partitions)})
            infos = await asyncio.gather(*(client.get(i) for i in ids))
            assert all(info.state is State.SCHEDULED for info in infos)
            later = await client.reschedule(ids[0], delay_ms="2h")
            assert (await client.get(ids[0])).deliver_at_ms == later
            assert await client.cancel(ids[1]) is State.CANCELLED
            assert router.fetches == 1  # no answer sent it back to the map

            # a stale map (every partition on n1): "not owner", the map read again once
            router._addresses = [stale] * run.partitions
            foreign = [i for i in ids if owners[partition_of(i, run.partitions)] != "n1"]
            assert (await client.get(foreign[0])).state is State.SCHEDULED
            assert router.fetches == 2
            router._addresses = [stale] * run.partitions
            untouched = ids[2:]
            resent = await client.send_batch([request(i) for i in untouched])
            assert [r.message_id for r in resent] == untouched and all(r.existed for r in resent)
            assert router.fetches == 3

            # a batch of several owners that fails in part says which were acknowledged
            fresh = ids_in_every_partition(run.partitions, "async-partial")
            taken = next(i for i in fresh if owners[partition_of(i, run.partitions)] == "n3")
            await client.send("orders", b"first", delay_ms="1h", message_id=taken)
            with pytest.raises(RemoteError) as refused:
                await client.send_batch([request(i, b"second") for i in fresh])
            assert refused.value.code == grpc.StatusCode.ALREADY_EXISTS
            assert f"messages[{fresh.index(taken)}].message_id='{taken}'" in refused.value.details
            assert "not acknowledged" in refused.value.details
            assert router.fetches == 3
        n3_ids = {i for i in fresh if owners[partition_of(i, run.partitions)] == "n3"}
        for message_id in fresh:
            expected = "NOT_FOUND" if message_id in n3_ids - {taken} else "SCHEDULED"
            assert state_of(stale, message_id) == expected, message_id

    asyncio.run(asyncio.wait_for(main(), CALL_S * 6))


def test_a_producer_batch_goes_to_each_owner(run):
    """The batching producers split a batch by owner: one SendBatch per node that owns
    some of its ids, each answered there (all stored, each future its own result)."""
    owners = owners_by_partition(run)
    nodes = len(set(owners.values()))
    ids = ids_in_every_partition(run.partitions, "producer", per_partition=1)
    with TimerClient(run.servers["n2"].target, timeout_s=CALL_S) as client:
        with client.producer(linger_ms=60_000, max_batch=len(ids)) as producer:
            futures = [producer.send("orders", b"p", delay_ms="1h", message_id=i) for i in ids]
            assert [f.result(CALL_S).message_id for f in futures] == ids
        assert producer.batches_sent == nodes
        assert client.router is not None and len(client.router._channels) == nodes

    async def main() -> None:
        async with AsyncClient(run.servers["n3"].target, timeout_s=CALL_S) as client:
            async with client.producer(linger_ms=60_000, max_batch=len(ids)) as producer:
                futures = [producer.send("orders", b"p", delay_ms="1h", message_id=i) for i in ids]
                results = await asyncio.gather(*futures)
            assert [r.message_id for r in results] == ids and all(r.existed for r in results)
            assert producer.batches_sent == nodes

    asyncio.run(asyncio.wait_for(main(), CALL_S * 3))
    assert {state_of(run.servers["n1"].target, i) for i in ids} == {"SCHEDULED"}
