"""A topic's retry table over real gRPC: `consume()` with a handler that always raises, on
a server whose settings give the topic a backoff and an attempt limit. The send names
neither, so each nack waits the topic's backoff (not the server's 1 s) and the message
goes to `<topic>.dlq` after the topic's max_attempts. Timings with generous bounds."""

from __future__ import annotations

import itertools
import threading
import time

from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.common import State
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.topic_policy import TopicSettings

# 60 ms, x2, no jitter: waits of 60 and 120 ms; 3 attempts.
TOPIC = TopicSettings("orders", max_attempts=3, initial_ms=60, multiplier=2.0, jitter_percent=0)
WAITS_MS = [60, 120]
SLACK_MS = 5  # the clocks' granularity: the wait starts at the nack's arrival, later
LATE_MS = 800  # the server's own 1 s first wait would exceed 60 + 800 on the first gap


def test_a_poison_message_backs_off_by_its_topic_s_table(make_server):
    server = make_server(topics=(TOPIC,), max_attempts=0)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        sent = client.send("orders", b"x", delay_ms=0)
        seen: list[tuple[int, float]] = []  # (attempt, when the handler ran)
        stop = threading.Event()

        def handle(message):
            seen.append((message.attempt, time.monotonic()))
            if len(seen) >= 3:
                stop.set()
            raise ValueError("cannot parse")

        assert client.consume("orders", handle, stop=stop) == 0
        assert [attempt for attempt, _ in seen] == [1, 2, 3]
        gaps_ms = [(b - a) * 1000 for (_, a), (_, b) in itertools.pairwise(seen)]
        for gap, wait in zip(gaps_ms, WAITS_MS, strict=True):
            assert wait - SLACK_MS <= gap <= wait + LATE_MS, gaps_ms
        deadline = time.monotonic() + WAIT_S
        while (dead := client.get(sent.message_id, include_trace=True)).proto.topic != "orders.dlq":
            assert time.monotonic() < deadline, "never dead-lettered"
            time.sleep(0.02)
        assert dead.state is State.FIRED
        assert dead.proto.properties["timerwheel.dead_letter.attempts"] == "3"
        delivered = [e.attempt for e in dead.proto.trace if e.kind == pb.TRACE_DELIVERED]
        assert delivered == [1, 2, 3]
