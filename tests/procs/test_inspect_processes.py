"""InFlight, Consumers, List's search and Stats' throughput counters through `timerwheel
serve --workers 2`: the hub's view crosses from the delivery process to the gRPC workers
(`DeliveryApi`, procs/delivery_host.py), the counters from the engine process, and every
worker answers alike."""

from __future__ import annotations

import time

import pytest
from helpers.waits import WAIT_S

from timerwheel import Client

pytestmark = pytest.mark.system  # a `serve --workers 2` process tree


def test_the_hubs_view_and_the_counters_across_processes(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "2", "--ack-timeout", "60s")
    with Client(server.target, timeout_s=WAIT_S, connections=2) as client:
        client.wait_ready()  # one connection on each worker
        sent = client.send("billing", b"x", delay_ms=0).message_id
        client.send("billing", b"x", delay_ms="1h", message_id="later-1",
                    properties={"region": "eu"})  # fmt: skip
        with client.subscribe("billing", max_in_flight=4, consumer="proc-biller") as stream:
            assert [d.message_id for d in next(iter(stream))] == [sent]
            until = time.monotonic() + WAIT_S
            while True:  # each call may land on either worker: each must see the hub
                answers = [client.in_flight("billing") for _ in range(4)]
                consumers = [client.consumers("billing") for _ in range(4)]
                if all(a.messages for a in answers) or time.monotonic() > until:
                    break
                time.sleep(0.05)
            for answer in answers:
                [message] = answer.messages
                assert (message.message_id, message.consumer, message.attempt) == (
                    sent, "proc-biller", 1,
                )  # fmt: skip
                assert message.in_flight and answer.fired_unacked == 1
            for answer in consumers:
                [stream_info] = answer.consumers
                assert (stream_info.consumer, stream_info.in_flight) == ("proc-biller", 1)
                [lag] = answer.lag
                assert (lag.pending, lag.fired_unacked, lag.in_flight) == (1, 1, 1)
                assert lag.oldest_unacked_fired_at_ms > 0
            assert client.ack("billing", [sent]) == 1

        found, _ = client.list("billing", id_prefix="later-", properties={"region": "eu"})
        assert [t.message_id for t in found] == ["later-1"]
        stats = client.stats()
        assert (stats.sends_total, stats.fires_total, stats.acks_total) == (2, 1, 1)
