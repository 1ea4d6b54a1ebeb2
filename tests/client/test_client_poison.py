"""A poison message over real gRPC: `consume()` with a handler that always raises. Each
nack is redelivered after the message's retry backoff (here a small exponential policy
sent with it), not at once, and after max_attempts the message is in `<topic>.dlq` with
its attempts in its trace. Timings are asserted with generous bounds, never exactly."""

from __future__ import annotations

import itertools
import logging
import threading
import time

from timerwheel.client import TimerClient
from timerwheel.common import State
from timerwheel.v1 import timerwheel_pb2 as pb

# 50 ms, x2, 20% jitter: waits in [40, 50], [80, 100], [160, 200] ms.
POLICY = pb.RetryPolicy(
    kind=pb.RETRY_EXPONENTIAL, initial_ms=50, max_ms=1_000, multiplier=2, jitter_percent=20
)
LOWEST_WAITS_MS = [40, 80, 160]  # 50 ms less 20%, doubling
SLACK_MS = 5  # the clocks' granularity: the wait starts at the nack's arrival, later
LATE_MS = 1_500  # a loaded machine may be slow; a storm is never this regular


def test_a_poison_message_backs_off_then_lands_in_its_dead_letter_topic(client, caplog):
    request = TimerClient.request("poison", b"x", delay_ms=0, max_attempts=4, retry=POLICY)
    [sent] = client.send_batch([request])
    seen: list[tuple[int, float]] = []  # (attempt, when the handler ran)
    stop = threading.Event()

    def handle(message):
        seen.append((message.attempt, time.monotonic()))
        if len(seen) >= 4:
            stop.set()
        raise ValueError("cannot parse")

    assert client.consume("poison", handle, stop=stop) == 0
    assert [attempt for attempt, _ in seen] == [1, 2, 3, 4]
    gaps_ms = [(b - a) * 1000 for (_, a), (_, b) in itertools.pairwise(seen)]
    for gap, lowest in zip(gaps_ms, LOWEST_WAITS_MS, strict=True):
        assert lowest - SLACK_MS <= gap <= lowest * 1.25 + LATE_MS, gaps_ms
    deadline = time.monotonic() + 10
    while (dead := client.get(sent.message_id, include_trace=True)).proto.topic != "poison.dlq":
        assert time.monotonic() < deadline, "never dead-lettered"
        time.sleep(0.02)
    assert dead.state is State.FIRED
    assert dead.proto.properties["timerwheel.dead_letter.attempts"] == "4"
    assert "ValueError: cannot parse" in dead.proto.properties["timerwheel.dead_letter.reason"]
    delivered = [e.attempt for e in dead.proto.trace if e.kind == pb.TRACE_DELIVERED]
    assert delivered == [1, 2, 3, 4]
    # The first failure is logged with its traceback; the retries only at DEBUG.
    warnings = [r for r in caplog.records if r.getMessage().startswith("consume_handler_failed")
                and r.levelno >= logging.WARNING]  # fmt: skip
    assert len(warnings) == 1 and warnings[0].exc_info is not None
