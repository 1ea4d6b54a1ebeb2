"""Recurring series and the bulk calls on a real three-node cluster over a real JetStream
cluster (docs/cluster.md, "Recurring series" and "Whole-cluster BulkCancel, Purge and
Redrive"): a series sent to one node fires from its owner, pauses and resumes through a
node that does not own it, and goes on from the next owner after a kill -9 of its owner
with no occurrence lost; BulkCancel, Purge and Redrive asked of one node change the
timers of every partition, whichever node owns it, with the counts summed."""

from __future__ import annotations

import signal
import time

import grpc
import pytest
from helpers.cluster_nodes import ClusterRun, Consumer

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

EVERY_MS = 1_000


def id_owned_by(run: ClusterRun, owned: dict[str, list[int]], node: str, prefix: str) -> str:
    n = 0
    while partition_of(f"{prefix}-{n}", run.partitions) not in owned[node]:
        n += 1
    return f"{prefix}-{n}"


def ids_in_every_partition(partitions: int, prefix: str, per_partition: int) -> list[str]:
    found: dict[int, list[str]] = {p: [] for p in range(partitions)}
    n = 0
    while any(len(ids) < per_partition for ids in found.values()):
        n += 1
        ids = found[partition_of(f"{prefix}-{n}", partitions)]
        if len(ids) < per_partition:
            ids.append(f"{prefix}-{n}")
    return [message_id for ids in found.values() for message_id in ids]


def numbers(run: ClusterRun, series_id: str) -> list[tuple[int, int, int]]:
    """(occurrence number, deliver time, received at) of every delivery, in order."""
    with run.lock:
        got = list(run.received)
    return [
        (int(r.message_id.split("#")[1]), r.deliver_at_ms, r.received_at_ms)
        for r in got
        if r.message_id.startswith(series_id + "#")
    ]


def wait_for(what, bound_s: float, said: str):
    deadline = time.monotonic() + bound_s
    while True:
        found = what()
        if found:
            return found
        assert time.monotonic() < deadline, said
        time.sleep(0.1)


def test_a_series_fires_pauses_resumes_and_survives_its_owners_kill(tmp_path):
    with ClusterRun(tmp_path, topic="ticks") as run:
        owned = run.wait_all_owned()
        series_id = id_owned_by(run, owned, "n2", "tick")  # owned by n2
        consumer = Consumer(
            "all", run.servers["n1"].target, "ticks", run.received, run.lock, own_only=False
        ).start()
        run.consumers.append(consumer)
        with TimerClient(run.servers["n1"].target, timeout_s=10, routing=False) as client:
            sent = client.send(
                "ticks", b"t", delay_ms=EVERY_MS, message_id=series_id,
                repeat=pb.Repeat(every_ms=EVERY_MS),
            )  # fmt: skip
            assert not sent.existed  # forwarded to n2, which stored and logged it
        wait_for(lambda: len(numbers(run, series_id)) >= 3, 30, "no three occurrences")

        # pause and resume through n3, which does not own the series
        with grpc.insecure_channel(run.servers["n3"].target) as channel:
            service = pb_grpc.TimerServiceStub(channel)
            request = pb.PauseSeriesRequest(series_id=series_id)
            assert service.PauseSeries(request, timeout=10).changed
            paused_at_ms = int(time.time() * 1000)
            assert not service.PauseSeries(request, timeout=10).changed  # paused already
            before = len(numbers(run, series_id))
            time.sleep(3 * EVERY_MS / 1000)  # the span the pause must leave empty
            resumed = service.ResumeSeries(pb.ResumeSeriesRequest(series_id=series_id), timeout=10)
            assert resumed.changed
            resumed_at_ms = int(time.time() * 1000)
        wait_for(lambda: len(numbers(run, series_id)) > before + 2, 30, "not resumed")
        in_pause = [
            (n, at) for n, at, _ in numbers(run, series_id)
            if paused_at_ms + EVERY_MS < at < resumed_at_ms - EVERY_MS
        ]  # fmt: skip
        assert in_pause == [], f"occurrences due while paused fired: {in_pause}"

        # kill -9 of the owner: the next owner goes on from the log
        last_before = max(n for n, _, _ in numbers(run, series_id))
        run.servers["n2"].proc.send_signal(signal.SIGKILL)
        killed_at_ms = int(time.time() * 1000)
        wait_for(
            lambda: any(
                received > killed_at_ms + 1_000 and n > last_before + 2
                for n, _, received in numbers(run, series_id)
            ),
            60, "the series did not go on after its owner's kill",
        )  # fmt: skip
        seen = sorted({n for n, _, _ in numbers(run, series_id)})
        assert seen == list(range(1, seen[-1] + 1)), f"occurrences lost: {seen}"
        # every occurrence is delivered once, or again only if un-acked at the kill
        again = [n for n in seen if [m for m, _, _ in numbers(run, series_id)].count(n) > 1]
        assert all(n >= last_before - 3 for n in again), f"acked ones fired again: {again}"


def test_bulk_cancel_purge_and_redrive_from_one_node_reach_every_partition(tmp_path):
    with ClusterRun(tmp_path, topic="unused") as run:
        owned = run.wait_all_owned()
        assert all(owned.values()), f"every node owns partitions: {owned}"
        cancel_ids = ids_in_every_partition(run.partitions, "c", 3)
        purge_ids = ids_in_every_partition(run.partitions, "p", 2)
        dead_ids = ids_in_every_partition(run.partitions, "d", 2)
        with TimerClient(run.servers["n1"].target, timeout_s=10) as client:
            for message_id in cancel_ids:
                client.send("later", b"c", delay_ms="1h", message_id=message_id)
            for message_id in purge_ids:  # fired at once, never consumed
                client.send("now", b"p", delay_ms=0, message_id=message_id)
            for message_id in dead_ids:  # one attempt, nacked: dead letters
                client.send(
                    "fails", b"d", delay_ms=0, message_id=message_id, max_attempts=1,
                    dead_letter_topic="fails.dlq",
                )  # fmt: skip
        target = run.servers["n3"].target
        with grpc.insecure_channel(target) as channel:
            admin = pb_grpc.TimerAdminStub(channel)
            service = pb_grpc.TimerServiceStub(channel)

            def backlog(topic: str) -> tuple[int, int]:
                rows = {t.topic: t for t in admin.Topics(pb.TopicsRequest(), timeout=20).topics}
                row = rows.get(topic)
                return (row.pending, row.fired_unacked) if row else (0, 0)

            # BulkCancel, two at most a node a call: pages until none remain
            cancelled, calls, token = 0, 0, ""
            while True:
                answer = admin.BulkCancel(
                    pb.BulkRequest(filter=pb.TimerFilter(topic="later"), limit=2,
                                   page_token=token), timeout=20,
                )  # fmt: skip
                cancelled += answer.cancelled
                calls += 1
                token = answer.next_page_token
                assert answer.more == bool(token)
                if not answer.more:
                    break
                assert calls < 20, "the pages do not end"
            assert cancelled == len(cancel_ids) and calls >= 2
            assert backlog("later") == (0, 0)
            with TimerClient(run.servers["n2"].target, timeout_s=10) as client:
                assert {client.get(i).state.name for i in cancel_ids} == {"CANCELLED"}

            # Purge: the fired, un-acked messages of every partition
            wait_for(lambda: backlog("now") == (0, len(purge_ids)), 30, "not all fired")
            purged = admin.Purge(pb.BulkRequest(filter=pb.TimerFilter(topic="now")), timeout=20)
            assert (purged.purged, purged.cancelled, purged.more) == (len(purge_ids), 0, False)
            assert backlog("now") == (0, 0)
            again = admin.Purge(pb.BulkRequest(filter=pb.TimerFilter(topic="now")), timeout=20)
            assert again.purged == 0  # a retry changes nothing more

            # Redrive: dead letters of every partition back to their topic
            subscription = service.Subscribe(pb.SubscribeRequest(topic="fails"), timeout=60)
            nacked: set[str] = set()
            for batch in subscription:
                ids = [d.message_id for d in batch.deliveries]
                nack = pb.NackRequest(topic="fails", message_ids=ids, reason="no")
                service.Nack(nack, timeout=10)
                nacked.update(ids)
                if nacked >= set(dead_ids):
                    break
            subscription.cancel()
            wait_for(lambda: backlog("fails.dlq") == (0, len(dead_ids)), 30, "not dead-lettered")
            moved = admin.Redrive(pb.RedriveRequest(dead_letter_topic="fails.dlq"), timeout=20)
            assert (moved.moved, moved.more) == (len(dead_ids), False)
            assert backlog("fails.dlq") == (0, 0)
            assert backlog("fails")[1] == len(dead_ids)
