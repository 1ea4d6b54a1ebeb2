"""Retry policy: how long a message waits before its next delivery after a failed attempt.

A failed attempt (an ack timeout, or a nack that names no backoff of its own) is
delivered again `backoff_ms` later, not at once: a message that fails every time (a
"poison" message) would otherwise be retried as fast as a consumer can fail it, and log
as fast. A message may carry its own policy (SendRequest.retry); the rest use the
server's (`Settings.retry_policy`). Pure: the random draw is the caller's, so a test can
pin it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

MAX_RETRY_DELAY_MS = 24 * 3600 * 1000  # a backoff beyond a day is a lost message, not a retry
MAX_MULTIPLIER = 100.0


class RetryKind(IntEnum):
    """Values equal the proto enum `timerwheel.v1.RetryKind` (0 there: the server's)."""

    FIXED = 1  # every retry waits initial_ms
    EXPONENTIAL = 2  # retry n waits initial_ms * multiplier ** (n - 1), at most max_ms


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    kind: RetryKind = RetryKind.EXPONENTIAL
    initial_ms: int = 1_000  # 0: no backoff (redelivered at once)
    max_ms: int = 300_000  # the cap of an exponential backoff
    multiplier: float = 2.0
    # Each wait is shortened by a random share of up to this percent, so the retries of
    # messages that failed together (one bad deploy) spread out instead of coming back
    # as one burst; shortened, never lengthened, so `max_ms` stays a true cap.
    jitter_percent: int = 20


def backoff_ms(policy: RetryPolicy, failed_attempt: int, random01: float) -> int:
    """The wait before the delivery after failed attempt `failed_attempt` (1 = the first
    delivery failed); `random01` in [0, 1) draws the jitter."""
    if policy.initial_ms <= 0:
        return 0
    if policy.kind is RetryKind.FIXED:
        base = float(policy.initial_ms)
    else:
        exponent = max(failed_attempt - 1, 0)
        base = float(policy.max_ms)
        if exponent < 64:  # beyond, any multiplier > 1 is past any cap; no float overflow
            base = min(policy.initial_ms * policy.multiplier**exponent, base)
    return max(int(base - base * policy.jitter_percent / 100 * random01), 0)


def check_policy(policy: RetryPolicy) -> tuple[str, object, str] | None:
    """What is wrong with `policy`: (field, value, why), or None."""
    if not 0 <= policy.initial_ms <= MAX_RETRY_DELAY_MS:
        return "initial_ms", policy.initial_ms, f"must be 0..{MAX_RETRY_DELAY_MS} (0: no backoff)"
    if policy.kind is RetryKind.EXPONENTIAL:
        if not policy.initial_ms <= policy.max_ms <= MAX_RETRY_DELAY_MS:
            why = f"must be initial_ms ({policy.initial_ms})..{MAX_RETRY_DELAY_MS}"
            return "max_ms", policy.max_ms, why
        if not 1.0 <= policy.multiplier <= MAX_MULTIPLIER:  # NaN fails too
            return "multiplier", policy.multiplier, f"must be 1..{MAX_MULTIPLIER:g}"
    if not 0 <= policy.jitter_percent <= 100:
        return "jitter_percent", policy.jitter_percent, "must be 0..100"
    return None
