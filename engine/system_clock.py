"""The wall clock, at the edge: the only place the service reads real time for scheduling."""

import time


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000
