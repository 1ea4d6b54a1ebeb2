"""Which calls the clients retry when the server is briefly away (a restart), and how.

A call that meets a server restarting (its connection reset, or refused until the new
process listens) fails with UNAVAILABLE. A call that can be repeated without changing
the outcome is retried with backoff, so a restart is invisible to the caller:

* gRPC's own retry policy (the channel's service config, `SERVICE_CONFIG`) retries the
  methods that are idempotent whatever the request: Get, List, Count, Ack (an id already
  acked is skipped), Cancel (a cancelled timer answers CANCELLED again), PauseSeries and
  ResumeSeries (a repeat finds it so already: `changed` False), Stats, Topics.
* A send is idempotent only when every message carries a client-chosen message_id (a
  repeat answers as the first, `existed` True if the first was stored) and none asks
  IF_EXISTS_REPLACE (a repeat would replace again, a relative delay counted anew). A
  reschedule is idempotent only to an absolute `deliver_at_ms`. The service config is
  per method, not per request, so the clients retry these themselves (`Backoff`), on
  the same schedule.
* Never retried: a send with a server-made id (a repeat would store a second timer),
  a reschedule by a delay (it would move the timer again), Nack (each counts an
  attempt), Subscribe (the consumer loop opens a new stream), Export, health checks (they
  say how the server is now).

The schedule: at most `MAX_ATTEMPTS` attempts (gRPC's own ceiling), waiting
`INITIAL_BACKOFF_S`, then twice as long each time up to `MAX_BACKOFF_S` (each wait
randomised by 20%, as gRPC does): about 3 s of waiting in all, so a server back within
about 2 s is not noticed, and a server that is not there at all is reported (UNAVAILABLE)
after those 3 s rather than at once. A client may scale that budget (`RetrySchedule`,
`Client(..., restart_budget_s=...)`): the same shape, every wait scaled. All attempts
share the call's deadline (`timeout_s`): a deadline that comes first ends the call (gRPC
says DEADLINE_EXCEEDED, the clients' own retries the last UNAVAILABLE). The channel
tries to reconnect at least once a second (`RETRY_OPTIONS`; gRPC's default backs off to
two minutes), so a server that is back is found again within the budget.

wait_for_ready is not set: it would make every call to a stopped server wait out its
whole deadline instead of saying UNAVAILABLE, and a send with a server-made id must
fail at once.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import grpc

from timerwheel.v1 import timerwheel_pb2 as pb

MAX_ATTEMPTS = 5  # the first and four retries; gRPC cuts a larger maxAttempts to 5
INITIAL_BACKOFF_S = 0.2
BACKOFF_MULTIPLIER = 2.0
MAX_BACKOFF_S = 1.6
JITTER = 0.2  # gRPC's own retry backoff is randomised by this share either way
RETRYABLE = grpc.StatusCode.UNAVAILABLE

# Idempotent whatever the request: retried by gRPC itself.
IDEMPOTENT_METHODS = {
    "timerwheel.v1.TimerService": [
        "Get",
        "List",
        "Count",
        "Ack",
        "Cancel",
        "PauseSeries",
        "ResumeSeries",
    ],
    "timerwheel.v1.TimerAdmin": ["Stats", "Topics"],
}


def _seconds(value: float) -> str:
    return f"{value:g}s"  # proto3 JSON's Duration: "0.25s"


DEFAULT_BUDGET_S = sum(
    min(INITIAL_BACKOFF_S * BACKOFF_MULTIPLIER**n, MAX_BACKOFF_S) for n in range(MAX_ATTEMPTS - 1)
)  # 3.0 s of waits


@dataclass(frozen=True)
class RetrySchedule:
    """How long a call rides through a server that is away: its waits add up to about
    `budget_s` (`DEFAULT_BUDGET_S`: `INITIAL_BACKOFF_S` doubling up to `MAX_BACKOFF_S`
    over `MAX_ATTEMPTS`), the same shape scaled. A client whose servers take longer to
    come back (a big store to open, a busy machine) gives a larger budget:
    `Client(..., restart_budget_s=20)`."""

    budget_s: float = DEFAULT_BUDGET_S

    def __post_init__(self) -> None:
        if not 0.5 <= self.budget_s <= 600:
            raise ValueError(f"restart_budget_s={self.budget_s!r}: must be 0.5..600 seconds")

    @property
    def initial_s(self) -> float:
        return INITIAL_BACKOFF_S * self.budget_s / DEFAULT_BUDGET_S

    @property
    def max_s(self) -> float:
        return MAX_BACKOFF_S * self.budget_s / DEFAULT_BUDGET_S

    def service_config(self) -> str:
        """gRPC's retry policy for the idempotent methods, on this schedule."""
        policy = {
            "maxAttempts": MAX_ATTEMPTS,
            "initialBackoff": _seconds(self.initial_s),
            "maxBackoff": _seconds(self.max_s),
            "backoffMultiplier": BACKOFF_MULTIPLIER,
            "retryableStatusCodes": [RETRYABLE.name],
        }
        names = [
            {"service": service, "method": method}
            for service, methods in IDEMPOTENT_METHODS.items()
            for method in methods
        ]
        return json.dumps({"methodConfig": [{"name": names, "retryPolicy": policy}]})

    def backoffs(self) -> Iterator[float]:
        """The waits before each retry, as gRPC's retry policy: `MAX_ATTEMPTS - 1`."""
        wait = self.initial_s
        for _ in range(MAX_ATTEMPTS - 1):
            yield wait * random.uniform(1 - JITTER, 1 + JITTER)
            wait = min(wait * BACKOFF_MULTIPLIER, self.max_s)


DEFAULT_SCHEDULE = RetrySchedule()
SERVICE_CONFIG = DEFAULT_SCHEDULE.service_config()

RETRY_OPTIONS = [
    ("grpc.enable_retries", 1),  # the default of grpcio; said so the policy cannot be off
    ("grpc.service_config", SERVICE_CONFIG),
    ("grpc.initial_reconnect_backoff_ms", 250),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


def with_schedule(options: list, schedule: RetrySchedule) -> list:
    """Channel `options` with the retry policy of `schedule` instead of the default's."""
    if schedule == DEFAULT_SCHEDULE:
        return options
    config = ("grpc.service_config", schedule.service_config())
    return [config if name == "grpc.service_config" else (name, value) for name, value in options]


def backoffs() -> Iterator[float]:
    """The default schedule's waits before each retry."""
    return DEFAULT_SCHEDULE.backoffs()


def sends_are_idempotent(requests: Iterable[pb.SendRequest]) -> bool:
    """Whether repeating these sends cannot store anything twice nor move a timer."""
    return all(r.message_id and r.if_exists != pb.IF_EXISTS_REPLACE for r in requests)


def reschedule_is_idempotent(request: pb.RescheduleRequest) -> bool:
    return request.WhichOneof("when") == "deliver_at_ms"


def retry_unavailable(
    method, request, timeout_s: float | None, schedule: RetrySchedule | None = None
):
    """`method(request, timeout=...)`, tried again on UNAVAILABLE after each of
    `schedule`'s backoffs (the default's without one), all within one deadline of
    `timeout_s` (None: no deadline), as gRPC's retry policy does; the last error is
    raised."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    waits = (schedule or DEFAULT_SCHEDULE).backoffs()
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return method(request, timeout=left)
        except grpc.RpcError as error:
            wait = next(waits, None) if error.code() == RETRYABLE else None
            if wait is None or (deadline is not None and time.monotonic() + wait >= deadline):
                raise
        time.sleep(wait)


async def retry_unavailable_async(
    method, request, timeout_s: float | None, schedule: RetrySchedule | None = None
):
    """`retry_unavailable` for grpc.aio."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    waits = (schedule or DEFAULT_SCHEDULE).backoffs()
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return await method(request, timeout=left)
        except grpc.RpcError as error:
            wait = next(waits, None) if error.code() == RETRYABLE else None
            if wait is None or (deadline is not None and time.monotonic() + wait >= deadline):
                raise
        await asyncio.sleep(wait)
