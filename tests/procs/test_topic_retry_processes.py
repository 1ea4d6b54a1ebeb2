"""A topic's retry table through `timerwheel serve --workers 1 --config FILE`: the TOML
file's `[topics."orders"]` reaches the delivery process, which decides retries, and a
poison message there backs off by the topic's policy and is dead-lettered after the
topic's max_attempts, while a topic without a table keeps the server's."""

from __future__ import annotations

import itertools
import threading
import time

import pytest
from helpers.serve_process import ServeProcess
from helpers.waits import WAIT_S

from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.system  # a `serve --workers 1` process tree

CONFIG = """
max_attempts = 0

[topics."orders"]
max_attempts = 3

[topics."orders".retry]
backoff = "fixed"
initial_ms = "150ms"
jitter_percent = 0
"""
WAIT_MS = 150
LATE_MS = 800  # under the server's own 1 s first wait


def test_the_delivery_process_backs_off_and_dead_letters_by_the_topic_s_table(tmp_path):
    config = tmp_path / "tw.toml"
    config.write_text(CONFIG)
    # four processes starting beside other suites on two cores: a longer start bound
    server = ServeProcess(tmp_path / "data", "--workers", "1", "--config", str(config), start_s=90)
    try:
        _poison_on_orders(server)
    finally:
        server.kill()


def _poison_on_orders(server: ServeProcess) -> None:
    with server.client() as client:
        sent = client.send("orders", b"x", delay_ms=0)
        seen: list[tuple[int, float]] = []
        stop = threading.Event()

        def handle(message):
            seen.append((message.attempt, time.monotonic()))
            if len(seen) >= 3:
                stop.set()
            raise ValueError("cannot parse")

        assert client.consume("orders", handle, stop=stop) == 0
        assert [attempt for attempt, _ in seen] == [1, 2, 3]
        gaps_ms = [(b - a) * 1000 for (_, a), (_, b) in itertools.pairwise(seen)]
        assert all(WAIT_MS - 5 <= gap <= WAIT_MS + LATE_MS for gap in gaps_ms), gaps_ms
        deadline = time.monotonic() + WAIT_S
        while (dead := client.get(sent.message_id, include_trace=True)).proto.topic != "orders.dlq":
            assert time.monotonic() < deadline, "never dead-lettered"
            time.sleep(0.02)
        assert dead.proto.properties["timerwheel.dead_letter.attempts"] == "3"
        assert [e.attempt for e in dead.proto.trace if e.kind == pb.TRACE_DELIVERED] == [1, 2, 3]
