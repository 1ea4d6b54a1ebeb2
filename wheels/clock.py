"""Clocks. The core never reads the wall clock: it is handed a `Clock`.

`VirtualClock` is for tests (time moves only when told to); the real clock lives in
`engine.system_clock`, at the edge.
"""

from __future__ import annotations

import threading
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Milliseconds since the Unix epoch."""
        ...


class VirtualClock:
    """A clock that only moves when a test moves it. Thread-safe, never goes backwards."""

    def __init__(self, start_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = start_ms
        self._lock = threading.Lock()

    def now_ms(self) -> int:
        with self._lock:
            return self._now_ms

    def advance(self, delta_ms: int) -> int:
        if delta_ms < 0:
            raise ValueError(f"delta_ms={delta_ms}: a virtual clock only moves forward")
        with self._lock:
            self._now_ms += delta_ms
            return self._now_ms
