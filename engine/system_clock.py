"""The wall clock, at the edge: the only place the service reads real time for scheduling."""

import time


class SystemClock:
    """`time.time()` in ms, shifted by `offset_ms` (Settings.clock_offset_ms: 0 except in
    tests that pin the server's time of day, see tests/system/test_time_of_day.py); and
    `time.monotonic()` in ms, to tell a step of the wall clock from time passing."""

    def __init__(self, offset_ms: int = 0) -> None:
        self.offset_ms = offset_ms

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000 + self.offset_ms

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000
