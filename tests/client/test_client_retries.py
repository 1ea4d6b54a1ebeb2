"""Which calls the client retries on UNAVAILABLE (timerwheel/retries.py), against a port
where nothing listens: an idempotent call is tried for the retry budget, a send with a
server-made id fails at once. The restart itself: tests/client/test_client_restart.py."""

from __future__ import annotations

import json
import time

import grpc
import pytest

from timerwheel.client import Client, RemoteError
from timerwheel.retries import (
    BACKOFF_MULTIPLIER,
    INITIAL_BACKOFF_S,
    JITTER,
    MAX_ATTEMPTS,
    MAX_BACKOFF_S,
    SERVICE_CONFIG,
    RetrySchedule,
    backoffs,
    reschedule_is_idempotent,
    sends_are_idempotent,
)
from timerwheel.types import CHANNEL_OPTIONS
from timerwheel.v1 import timerwheel_pb2 as pb

NOBODY = "127.0.0.1:1"  # nothing listens on port 1: every attempt is refused at once
# The shortest the retries can wait in all: each nominal wait, less its jitter.
BUDGET_S = (1 - JITTER) * sum(
    min(INITIAL_BACKOFF_S * BACKOFF_MULTIPLIER**n, MAX_BACKOFF_S) for n in range(MAX_ATTEMPTS - 1)
)


def timed_failure(call) -> tuple[grpc.StatusCode, float]:
    started = time.monotonic()
    with pytest.raises(RemoteError) as refused:
        call()
    return refused.value.code, time.monotonic() - started


def test_the_service_config_retries_the_idempotent_methods_on_unavailable():
    assert ("grpc.service_config", SERVICE_CONFIG) in CHANNEL_OPTIONS
    (method_config,) = json.loads(SERVICE_CONFIG)["methodConfig"]
    names = {(n["service"], n["method"]) for n in method_config["name"]}
    assert ("timerwheel.v1.TimerService", "Get") in names
    assert ("timerwheel.v1.TimerAdmin", "Stats") in names
    for never in ("Send", "SendBatch", "Reschedule", "Nack", "Subscribe"):
        assert ("timerwheel.v1.TimerService", never) not in names
    policy = method_config["retryPolicy"]
    assert policy["maxAttempts"] == MAX_ATTEMPTS <= 5  # gRPC cuts more to 5
    assert policy["retryableStatusCodes"] == ["UNAVAILABLE"]
    assert "waitForReady" not in method_config


def test_which_requests_are_idempotent():
    assert sends_are_idempotent([Client.request("t", message_id="a")])
    assert not sends_are_idempotent([Client.request("t", message_id="a"), Client.request("t")])
    replace = Client.request("t", message_id="a", if_exists=pb.IF_EXISTS_REPLACE)
    assert not sends_are_idempotent([replace])
    assert reschedule_is_idempotent(pb.RescheduleRequest(message_id="a", deliver_at_ms=5))
    assert not reschedule_is_idempotent(pb.RescheduleRequest(message_id="a", delay_ms=5))


def test_the_backoffs_grow_to_their_cap():
    waits = list(backoffs())
    assert len(waits) == MAX_ATTEMPTS - 1
    assert INITIAL_BACKOFF_S * (1 - JITTER) <= waits[0] <= INITIAL_BACKOFF_S * (1 + JITTER)


def test_an_idempotent_call_is_retried_and_a_server_named_send_is_not():
    with Client(NOBODY, timeout_s=10) as client:
        code, took_s = timed_failure(client.stats)  # gRPC's retry policy
        assert code is grpc.StatusCode.UNAVAILABLE and took_s >= BUDGET_S
        code, took_s = timed_failure(lambda: client.send("t", b"x", message_id="a"))
        assert code is grpc.StatusCode.UNAVAILABLE and took_s >= BUDGET_S
        code, took_s = timed_failure(lambda: client.send("t", b"x"))
        assert code is grpc.StatusCode.UNAVAILABLE and took_s < INITIAL_BACKOFF_S


def test_the_retries_end_at_the_deadline():
    with Client(NOBODY, timeout_s=0.5) as client:
        code, took_s = timed_failure(lambda: client.send("t", b"x", message_id="a"))
        assert code is grpc.StatusCode.UNAVAILABLE and took_s < 0.5 + INITIAL_BACKOFF_S
        code, took_s = timed_failure(client.stats)
        assert code is grpc.StatusCode.DEADLINE_EXCEEDED and took_s < 0.5 + INITIAL_BACKOFF_S


def test_a_larger_restart_budget_scales_every_wait():
    """`restart_budget_s` for servers slower to come back (a big store, a busy machine):
    the same shape of waits, scaled, in gRPC's policy and in the client's own retries."""
    schedule = RetrySchedule(12.0)  # four times the default's 3 s
    nominal = [4 * min(INITIAL_BACKOFF_S * BACKOFF_MULTIPLIER**n, MAX_BACKOFF_S) for n in range(4)]
    for wait, expected in zip(schedule.backoffs(), nominal, strict=True):
        assert expected * (1 - JITTER) <= wait <= expected * (1 + JITTER)
    policy = json.loads(schedule.service_config())["methodConfig"][0]["retryPolicy"]
    assert (policy["initialBackoff"], policy["maxBackoff"]) == ("0.8s", "6.4s")
    with Client(NOBODY, timeout_s=30, restart_budget_s=6.0) as client:  # twice the default
        code, took_s = timed_failure(client.stats)  # gRPC's retry policy, from the channel
        assert code is grpc.StatusCode.UNAVAILABLE and took_s >= 2 * BUDGET_S
        code, took_s = timed_failure(lambda: client.send("t", b"x", message_id="a"))
        assert code is grpc.StatusCode.UNAVAILABLE and took_s >= 2 * BUDGET_S
    with pytest.raises(ValueError, match=r"restart_budget_s=0\.1"):
        Client(NOBODY, restart_budget_s=0.1)
