"""Whole-cluster answers over a real three-node cluster on a real JetStream cluster:
List, Count and Topics asked of any one node see every partition's timers exactly once
(server/scatter.py), a node that does not answer makes them fail UNAVAILABLE naming it
(never a partial figure)."""

from __future__ import annotations

import os
import signal
import time

import grpc
import pytest
from helpers.cluster_nodes import ClusterRun

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

PER_PARTITION = 4


def ids_in_every_partition(partitions: int, prefix: str, per_partition: int) -> list[str]:
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(ids) < per_partition for ids in found.values()):
        n += 1
        ids = found[partition_of(f"{prefix}-{n}", partitions)]
        if len(ids) < per_partition:
            ids.append(f"{prefix}-{n}")
    return [message_id for ids in found.values() for message_id in ids]


def list_all(target: str, topic: str, limit: int) -> tuple[list[pb.TimerMessage], int]:
    """Every page of a List, and how many pages it took."""
    messages: list[pb.TimerMessage] = []
    token, pages = "", 0
    with grpc.insecure_channel(target) as channel:
        service = pb_grpc.TimerServiceStub(channel)
        while True:
            page = service.List(
                pb.ListRequest(topic=topic, limit=limit, page_token=token, include_body=True),
                timeout=20,
            )  # fmt: skip
            assert len(page.messages) <= limit
            messages.extend(page.messages)
            pages += 1
            token = page.next_page_token
            if not token:
                return messages, pages
            assert pages < 100, "the pages do not end"


def topics_pages(target: str, limit: int) -> list[pb.TopicsResponse]:
    pages = []
    token = ""
    with grpc.insecure_channel(target) as channel:
        admin = pb_grpc.TimerAdminStub(channel)
        while True:
            page = admin.Topics(pb.TopicsRequest(limit=limit, page_token=token), timeout=20)
            pages.append(page)
            token = page.next_page_token
            if not token:
                return pages


def count(target: str, topic: str, timeout_s: float = 20) -> int:
    with grpc.insecure_channel(target) as channel:
        service = pb_grpc.TimerServiceStub(channel)
        return service.Count(pb.CountRequest(topic=topic), timeout=timeout_s).pending


def test_list_count_and_topics_on_any_node_see_every_partition_once(tmp_path):
    with ClusterRun(tmp_path) as run:
        owned = run.wait_all_owned()
        assert all(owned.values()), f"every node owns partitions: {owned}"
        orders = ids_in_every_partition(run.partitions, "order", PER_PARTITION)
        audits = ids_in_every_partition(run.partitions, "audit", 1)
        with TimerClient(run.servers["n1"].target, timeout_s=10) as client:
            for n, message_id in enumerate(orders):  # distinct times, far enough ahead
                client.send("orders", b"o", delay_ms=3_600_000 + 1_000 * n, message_id=message_id)
            at_ms = int(time.time() * 1000) + 7_200_000
            for message_id in audits:  # one deliver time: ordered by id within it
                client.send("audit", b"a", deliver_at_ms=at_ms, message_id=message_id)
            client.send("zeta", b"z", delay_ms="2h", message_id=orders[0] + "-z")

        for name, server in run.servers.items():
            assert count(server.target, "orders") == len(orders), name
            assert count(server.target, "audit") == len(audits), name
            listed, pages = list_all(server.target, "orders", limit=5)
            got = [m.message_id for m in listed]
            assert got == orders, f"{name}: every timer once, by deliver time"  # sent in order
            assert pages >= len(orders) // 5 and all(m.body == b"o" for m in listed)
            same_time, _ = list_all(server.target, "audit", limit=4)
            assert [m.message_id for m in same_time] == sorted(audits), name

            pages_ = topics_pages(server.target, limit=1)
            assert [p.topics[0].topic for p in pages_] == ["audit", "orders", "zeta"], name
            assert [p.topics[0].pending for p in pages_] == [len(audits), len(orders), 1]
            assert {p.total for p in pages_} == {3}


def test_a_node_that_does_not_answer_fails_the_call_unavailable_never_partial(tmp_path):
    with ClusterRun(tmp_path) as run:
        owned = run.wait_all_owned()
        orders = ids_in_every_partition(run.partitions, "order", 2)
        with TimerClient(run.servers["n1"].target, timeout_s=10) as client:
            for message_id in orders:
                client.send("orders", b"o", delay_ms="1h", message_id=message_id)
        target = run.servers["n1"].target
        assert count(target, "orders") == len(orders)
        assert owned["n3"], "n3 owns partitions: it must be asked"

        stopped = run.servers["n3"].proc
        os.kill(stopped.pid, signal.SIGSTOP)
        try:
            with pytest.raises(grpc.RpcError) as refused:
                count(target, "orders", timeout_s=4)
            assert refused.value.code() is grpc.StatusCode.UNAVAILABLE
            assert "node n3" in (refused.value.details() or "")
            with pytest.raises(grpc.RpcError) as listed:
                list_all(target, "orders", limit=100)
            assert listed.value.code() is grpc.StatusCode.UNAVAILABLE
        finally:
            os.kill(stopped.pid, signal.SIGCONT)

        # while the cluster settles again: every answer is whole, or UNAVAILABLE
        deadline = time.monotonic() + 60
        while True:
            try:
                pending = count(target, "orders", timeout_s=8)
            except grpc.RpcError as error:
                assert error.code() is grpc.StatusCode.UNAVAILABLE, error
                assert time.monotonic() < deadline, f"no whole answer again: {error.details()}"
                time.sleep(0.2)
                continue
            assert pending == len(orders)
            break
