"""BulkCancel, Purge and Redrive through `timerwheel serve --workers 1`: each call crosses
from a gRPC worker to the engine process (RemoteEngine) and the delivery process
(RemoteHub), and does what it does in one process."""

from __future__ import annotations

import pytest
from helpers.streams import Collector

from timerwheel.client import TimerClient
from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.system  # a `serve --workers 1` process tree

F = TimerClient.timer_filter


def test_bulk_cancel_purge_and_redrive_across_processes(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "1")
    with server.client() as client:
        holder = Collector(client, "jobs", max_in_flight=1, auto_ack=False)
        dead = Collector(client, "jobs.dlq", auto_ack=False)
        try:
            later = [client.send("jobs", b"x", delay_ms=3_600_000).message_id for _ in range(3)]
            cancelled = client.bulk_cancel(F(topic="jobs"), limit=2)
            assert (cancelled.cancelled, cancelled.more) == (2, True)
            rest = client.bulk_cancel(F(topic="jobs"), page_token=cancelled.next_page_token)
            assert (rest.cancelled, rest.more) == (1, False)
            assert [client.get(i).state for i in later] == [pb.CANCELLED] * 3

            poison = client.send("jobs", b"p", delay_ms=0, max_attempts=1).message_id
            holder.wait_count(1)
            assert client.nack("jobs", [poison], reason="broken").dead_lettered == 1
            dead.wait_count(1)  # in flight on the dead-letter topic, never acked
            moved = client.redrive("jobs.dlq", F(topic="jobs"))
            assert (moved.moved, moved.more) == (1, False)
            again = holder.wait_count(2)[1]
            assert (again.message_id, again.attempt) == (poison, 1)

            # The holder's one place is taken by the redriven message; a purge frees it.
            purged = client.purge(F(topic="jobs"))
            assert (purged.cancelled, purged.purged) == (0, 1)
            fresh = client.send("jobs", b"f", delay_ms=0).message_id
            assert holder.wait_count(3)[2].message_id == fresh
            assert client.get(poison).state == pb.CANCELLED
        finally:
            holder.stop()
            dead.stop()
