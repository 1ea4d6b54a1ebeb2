"""The writer's clock, watched for steps: the edge where `timerwheel.wheels.clock_step` meets real
clocks and the log.

`ClockWatch` is a `Clock` that reads the wrapped one and, on every wall-clock reading,
feeds both readings to the pure detector. The engine hands it to the writer, whose loop
reads the clock at least every `timerwheel.engine.writer.MAX_IDLE_SLEEP_S` (and at every group
commit), so a step is noticed within a quarter of a second. A step is logged as a
warning (`clock_step`) and counted; `steps` is what Stats reports.
"""

from __future__ import annotations

import threading

import structlog

from timerwheel.wheels.clock import Clock
from timerwheel.wheels.clock_step import ClockSteps

log = structlog.get_logger("timerwheel.clock")


class ClockWatch:
    def __init__(self, clock: Clock, threshold_ms: int) -> None:
        self._clock = clock
        self._lock = threading.Lock()  # readings come from the writer; Stats reads `steps`
        self._steps = ClockSteps(threshold_ms)

    @property
    def steps(self) -> ClockSteps:
        """The detector's counters: steps forward and backward, and the last one."""
        return self._steps

    def check_resume(self, store_now_ms: int) -> None:
        """At open: warn (`clock_behind_store`) when the wall clock is behind the store's
        time, the highest time seen before the last stop, by more than the threshold: it
        was set back while the engine was down, and time stands still until it catches up."""
        behind_ms = store_now_ms - self._clock.now_ms()
        if behind_ms > self._steps.threshold_ms:
            log.warning(
                "clock_behind_store", behind_ms=behind_ms, store_now_ms=store_now_ms,
                threshold_ms=self._steps.threshold_ms,
            )  # fmt: skip

    def now_ms(self) -> int:
        with self._lock:
            wall_ms = self._clock.now_ms()
            self._steps, step = self._steps.observe(wall_ms, self._clock.monotonic_ms())
        if step is not None:
            log.warning(
                "clock_step", direction=step.direction, size_ms=step.size_ms,
                wall_before_ms=step.wall_before_ms, wall_after_ms=step.wall_after_ms,
                threshold_ms=self._steps.threshold_ms,
            )  # fmt: skip
        return wall_ms

    def monotonic_ms(self) -> int:
        return self._clock.monotonic_ms()

    def stats(self) -> dict[str, int]:
        """The Stats fields (proto StatsResponse): counts, and the last step's signed
        size and the wall time it stepped to (0 and 0 before any step)."""
        steps = self._steps
        last = steps.last
        return {
            "clock_steps_forward": steps.forward,
            "clock_steps_backward": steps.backward,
            "last_clock_step_ms": 0 if last is None else last.size_ms,
            "last_clock_step_at_ms": 0 if last is None else last.wall_after_ms,
        }
