"""Clocks. The core never reads the wall clock: it is handed a `Clock`.

A clock gives two readings: the wall clock (`now_ms`, epoch ms: what timers are due by)
and a monotonic one (`monotonic_ms`, arbitrary origin, never set by anyone), so a jump of
the wall clock can be told from time passing (`timerwheel.wheels.clock_step`).

`VirtualClock` is for tests (time moves only when told to); the real clock lives in
`timerwheel.engine.system_clock`, at the edge.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...

    def monotonic_ms(self) -> int:
        """Milliseconds from an arbitrary origin, never stepped: only differences mean
        anything (elapsed time, whatever the wall clock did meanwhile)."""
        ...


class VirtualClock:
    """A clock that only moves when a test moves it. Thread-safe.

    `advance` moves wall and monotonic time together (time passing); `step_wall` moves
    the wall clock alone, either way, as NTP or an operator setting the clock would.
    """

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._monotonic_ms = 0
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def monotonic_ms(self) -> int:
        with self._lock:
            return self._monotonic_ms

    def advance(self, delta_ms: int) -> int:
        if delta_ms < 0:
            raise ValueError(
                f"delta_ms={delta_ms}: time only passes forward (step_wall sets the clock back)"
            )
        with self._lock:
            self._now_ms += delta_ms
            self._monotonic_ms += delta_ms
            return self._now_ms

    def step_wall(self, delta_ms: int) -> int:
        """Set the wall clock `delta_ms` forward (> 0) or back (< 0) without time passing."""
        with self._lock:
            self._now_ms += delta_ms
            return self._now_ms
