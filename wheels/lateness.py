"""Recent fire lateness: per minute of firing, a bucketed histogram for percentiles.

What `Stats.fire_lateness` answers (and the web console charts): for each of the last
`RECENT_MINUTES` minutes in which timers fired, how many fired, their P50 and P99
lateness and the exact maximum. Lateness is fired_at_ms - deliver_at_ms of each fired
timer. Pure: the caller passes the minute the fires happened in.

Cost on the firing path: one commit's lateness values are sorted (in C, and nearly in
order already: a chunk fires in deliver-time order) and counted into their minute with
one binary search per bucket bound up to the largest value, not one per timer: about a
hundred searches for a chunk of 10,000 fires instead of 10,000 (`map(bisect, ...)` into
a Counter was a visible share of the engine's CPU in a burst). Percentiles are then the
upper bound of the bucket they fall in; ten buckets per power of ten make that at most
~26% above the true value, and never above the exact maximum.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections import Counter, deque
from collections.abc import Iterable
from dataclasses import dataclass

MINUTE_MS = 60_000
RECENT_MINUTES = 60
# Bucket upper bounds in ms: 0, then ten per power of ten up to a day (1, 2, 3, 4, 5, 6,
# 8, 10, 13, 16, 20, 25, ...); a lateness above the last goes in one more bucket.
BOUNDS_MS = tuple(sorted({0, *(round(10 ** (i / 10)) for i in range(80)), 86_400_000}))


def bucket_counts(values: list[int]) -> dict[int, int]:
    """{bucket: how many of `values` (sorted ascending) fall in it}, where bucket i holds
    the values in (BOUNDS_MS[i - 1], BOUNDS_MS[i]] and the last one those above every
    bound: the count of a bucket is where its bound cuts the sorted list, less where the
    bound before it did."""
    counts: dict[int, int] = {}
    below = 0  # values at or under the previous bound
    for bucket, bound in enumerate(BOUNDS_MS):
        upto = bisect_right(values, bound, below)
        if upto > below:
            counts[bucket] = upto - below
            below = upto
        if below == len(values):
            return counts
    counts[len(BOUNDS_MS)] = len(values) - below
    return counts


@dataclass(frozen=True)
class LatenessMinute:
    minute_ms: int
    fires: int
    p50_ms: int
    p99_ms: int
    max_ms: int


class _Minute:
    __slots__ = ("buckets", "fires", "max_ms", "minute_ms")

    def __init__(self, minute_ms: int) -> None:
        self.minute_ms = minute_ms
        self.buckets: Counter[int] = Counter()
        self.fires = 0
        self.max_ms = 0

    def summary(self) -> LatenessMinute:
        return LatenessMinute(
            self.minute_ms, self.fires, self._percentile(50), self._percentile(99),
            self.max_ms,
        )  # fmt: skip

    def _percentile(self, percent: int) -> int:
        """The upper bound of the bucket holding the value of rank ceil(percent% of n)."""
        rank = max(1, -(-self.fires * percent // 100))
        seen = 0
        for bucket in sorted(self.buckets):
            seen += self.buckets[bucket]
            if seen >= rank:
                bound = BOUNDS_MS[bucket] if bucket < len(BOUNDS_MS) else self.max_ms
                return min(bound, self.max_ms)
        return self.max_ms


class RecentLateness:
    """Thread-safe: the writer observes, Stats reads."""

    def __init__(self, minutes: int = RECENT_MINUTES) -> None:
        self._minutes: deque[_Minute] = deque(maxlen=minutes)
        self._keep_ms = minutes * MINUTE_MS
        self._lock = threading.Lock()

    def observe(self, fired_at_ms: int, lateness_ms: Iterable[int]) -> None:
        """Count the lateness of timers that fired at `fired_at_ms` (one group commit)."""
        values = sorted(lateness_ms)
        if not values:
            return
        minute_ms = fired_at_ms - fired_at_ms % MINUTE_MS
        with self._lock:
            minutes = self._minutes
            if not minutes or minutes[-1].minute_ms < minute_ms:
                minutes.append(_Minute(minute_ms))
            current = minutes[-1]  # a commit stamped a little earlier joins the latest minute
            current.buckets.update(bucket_counts(values))
            current.fires += len(values)
            current.max_ms = max(current.max_ms, values[-1])

    def recent(self, now_ms: int) -> list[LatenessMinute]:
        """The minutes of the last `minutes` (up to now_ms's) with fires, oldest first."""
        since_ms = now_ms - now_ms % MINUTE_MS - self._keep_ms + MINUTE_MS
        with self._lock:
            kept = [m for m in self._minutes if m.minute_ms >= since_ms]
            return [m.summary() for m in kept]
