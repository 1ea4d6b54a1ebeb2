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

Refusals that stored nothing
----------------------------
A server whose firing loop runs late refuses sends at the door, before it validates or
stores anything (docs/engine.md, "Backpressure"): RESOURCE_EXHAUSTED with the trailing
metadata `timerwheel-retry-after-ms` (`RETRY_AFTER_KEY`). Since nothing was stored, any
send so answered is sent again as it was, a server-made id too: after the time the
server asks (at least `REFUSED_MIN_WAIT_MS`), twice as long after each refusal in a
row, up to `REFUSED_MAX_WAIT_MS`, each wait randomised by `JITTER`, until the call's
deadline (`timeout_s`; without one, `REFUSED_BUDGET_S`) would pass; then the last
refusal is raised. The clients, their split sends and both producers do
(`Retrying`, `call_retrying`). Any other RESOURCE_EXHAUSTED (a full disk or backlog, a
message too large, a cluster's split batch part of which was stored) carries no marker
and is not retried.

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
# A refusal that stored nothing (server/errors.py sets it): send again after this long.
RETRY_AFTER_KEY = "timerwheel-retry-after-ms"
REFUSED_MIN_WAIT_MS = 10  # a server asking for less still gets a moment
REFUSED_MAX_WAIT_MS = 1_000  # the doubling stops here: a calm server is found within 1 s
REFUSED_BUDGET_S = 30.0  # how long a call without a deadline keeps retrying refusals

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


def retry_after_ms(error: grpc.RpcError) -> int | None:
    """The wait a refusal that stored nothing asks for (`RETRY_AFTER_KEY`), or None: any
    other answer, RESOURCE_EXHAUSTED without the marker included."""
    if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
        return None
    trailers = getattr(error, "trailing_metadata", None)
    for key, value in (trailers() if callable(trailers) else None) or ():
        if key == RETRY_AFTER_KEY:
            try:
                return max(0, int(value))
            except ValueError:
                return None
    return None


def refused_wait_s(after_ms: int, refused: int, jitter: float) -> float:
    """The wait after the `refused`-th refusal in a row (1: the first) whose server asked
    for `after_ms`: that (at least `REFUSED_MIN_WAIT_MS`), doubled for each refusal
    after the first, at most `REFUSED_MAX_WAIT_MS`, times `jitter` (about 1)."""
    wait_ms = max(after_ms, REFUSED_MIN_WAIT_MS) * 2 ** min(refused - 1, 20)
    return min(wait_ms, REFUSED_MAX_WAIT_MS) * jitter / 1000


def _jitter() -> float:
    return random.uniform(1 - JITTER, 1 + JITTER)


class Retrying:
    """One call's retry decision, over all its attempts (pure: the caller passes the
    time): refusals that stored nothing are always retried, UNAVAILABLE only when the
    request is idempotent (`unavailable`), each on its own schedule, all within the
    call's deadline. Times are `time.monotonic()` seconds."""

    def __init__(
        self, now: float, timeout_s: float | None, schedule: RetrySchedule | None = None,
        *, unavailable: bool = True,
    ) -> None:  # fmt: skip
        self.deadline = None if timeout_s is None else now + timeout_s
        # Refusals end at the deadline or, without one, after REFUSED_BUDGET_S.
        self.refused_until = now + (REFUSED_BUDGET_S if timeout_s is None else timeout_s)
        empty: Iterator[float] = iter(())
        self._unavailable = (schedule or DEFAULT_SCHEDULE).backoffs() if unavailable else empty
        self.refused = 0  # refusals in a row so far

    def left_s(self, now: float) -> float | None:
        """The timeout of an attempt made at `now` (None: no deadline)."""
        return None if self.deadline is None else max(0.0, self.deadline - now)

    def wait_s(
        self, code: grpc.StatusCode, after_ms: int | None, now: float, jitter: float = 1.0
    ) -> float | None:
        """How long to wait before the next attempt of a call answered `code` (with a
        retry-after of `after_ms`, or None) at `now`; None: raise that answer."""
        if after_ms is not None:
            self.refused += 1
            wait = refused_wait_s(after_ms, self.refused, jitter)
            until = self.refused_until
        elif code == RETRYABLE:
            wait = next(self._unavailable, None)
            until = self.deadline
        else:
            return None
        if wait is None or (until is not None and now + wait >= until):
            return None
        return wait

    def after(self, error: grpc.RpcError, now: float) -> float | None:
        """`wait_s` for the answer `error`, jittered."""
        return self.wait_s(error.code(), retry_after_ms(error), now, _jitter())


def call_retrying(
    method, request, timeout_s: float | None, schedule: RetrySchedule | None = None,
    *, unavailable: bool = True, answered: grpc.RpcError | None = None,
):  # fmt: skip
    """`method(request, timeout=...)`, tried again after a refusal that stored nothing
    and, with `unavailable`, on UNAVAILABLE after each of `schedule`'s backoffs (the
    default's without one), as gRPC's retry policy does; all within one deadline of
    `timeout_s` (None: no deadline). The last error is raised. `answered`: the call was
    made once already and answered this (a part of a split batch sent as a future)."""
    retrying = Retrying(time.monotonic(), timeout_s, schedule, unavailable=unavailable)
    error = answered
    while True:
        if error is not None:
            wait = retrying.after(error, time.monotonic())
            if wait is None:
                raise error
            time.sleep(wait)
        try:
            return method(request, timeout=retrying.left_s(time.monotonic()))
        except grpc.RpcError as exc:
            error = exc


async def call_retrying_async(
    method, request, timeout_s: float | None, schedule: RetrySchedule | None = None,
    *, unavailable: bool = True,
):  # fmt: skip
    """`call_retrying` for grpc.aio."""
    retrying = Retrying(time.monotonic(), timeout_s, schedule, unavailable=unavailable)
    while True:
        try:
            return await method(request, timeout=retrying.left_s(time.monotonic()))
        except grpc.RpcError as error:
            wait = retrying.after(error, time.monotonic())
            if wait is None:
                raise
        await asyncio.sleep(wait)
