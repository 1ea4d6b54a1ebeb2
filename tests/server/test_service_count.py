"""Count over real gRPC: exact per-topic totals, whole-minute ranges, refusals."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.time_of_day import wall_ms

pytestmark = pytest.mark.wallclock

MINUTE = 60_000


def test_count_totals_and_ranges_follow_sends_fires_cancels_and_moves(client):
    base = wall_ms() + 3_600_000
    base -= base % MINUTE  # a whole minute, an hour from now
    ids = [
        client.send("counted", b"x", deliver_at_ms=base + offset).message_id
        for offset in (0, 1_000, MINUTE, 5 * MINUTE)
    ]
    client.send("other", b"x", deliver_at_ms=base)
    client.send("counted", b"now", delay_ms=0)  # fires at once: never pending
    assert client.count("counted").pending == 4
    assert client.count("other").pending == 1

    whole = client.count("counted", base, base + 2 * MINUTE)
    assert (whole.pending, whole.from_ms, whole.to_ms) == (3, base, base + 2 * MINUTE)
    partial = client.count("counted", base + 30_000, base + MINUTE + 1)
    assert (partial.pending, partial.from_ms, partial.to_ms) == (3, base, base + 2 * MINUTE)
    assert client.count("counted", base + 2 * MINUTE).pending == 1  # to_ms 0: no bound

    client.cancel(ids[0])
    client.reschedule(ids[3], deliver_at_ms=base + 10 * MINUTE)
    assert client.count("counted").pending == 3
    assert client.count("counted", base, base + MINUTE).pending == 1
    assert client.count("counted", base + 10 * MINUTE, base + 11 * MINUTE).pending == 1
    client.reschedule(ids[1], delay_ms=0)  # fires now
    assert client.count("counted").pending == 2
    assert client.count("never-used").pending == 0


def test_count_refuses_bad_ranges_and_topics(client):
    for call, fragment in (
        (lambda: client.count("t", 2_000, 1_000), "to_ms=1000"),
        (lambda: client.count("t", 1_000, 1_000), "to_ms=1000"),
        (lambda: client.count("t", -1, 0), "from_ms=-1"),
        (lambda: client.count("bad topic"), "topic='bad topic'"),
    ):
        error = status_of(call)
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT and fragment in error.details
