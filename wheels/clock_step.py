"""Clock steps: telling a jump of the wall clock from time passing. Pure: readings in,
verdicts out; the clocks are read at the edge (`timerwheel.engine.clock_watch`).

Between two observations the wall clock (epoch ms, what timers are due by) and a
monotonic clock (which no one can set) should advance by the same amount. When they
differ by more than the threshold, the wall clock was *stepped*: set forward or back by
NTP, an operator or a VM restore. The step's size is the difference::

    size_ms = (wall_after - wall_before) - (monotonic_after - monotonic_before)

positive for a jump forward, negative for a jump back. Each observation becomes the
reference for the next, so the slow drift a clock discipline corrects by slewing (at
most 0.5 ms a second) never adds up to a step; and a step is reported once, by the
observation that first sees it.

A stopped process (SIGSTOP, a long pause of its own) shows as no step: both clocks run
on while it does not, so it sees the same gap in each, and only the work that fell due
meanwhile, done late. A machine that sleeps (suspend to RAM) shows as a step forward on
waking: Linux's `CLOCK_MONOTONIC` does not count suspended time and the wall clock does.
What the service does after a step is the same either way (docs/engine.md, "Clock steps").
"""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True, slots=True)
class ClockStep:
    """One detected step: `size_ms` > 0 forward, < 0 backward."""

    size_ms: int
    wall_before_ms: int
    wall_after_ms: int

    @property
    def direction(self) -> str:
        return "forward" if self.size_ms > 0 else "backward"


@dataclass(frozen=True, slots=True)
class ClockSteps:
    """The detector: the last observation, and the steps counted so far."""

    threshold_ms: int
    wall_ms: int | None = None  # the last observation (None before the first)
    monotonic_ms: int = 0
    forward: int = 0
    backward: int = 0
    last: ClockStep | None = None

    def observe(self, wall_ms: int, monotonic_ms: int) -> tuple[ClockSteps, ClockStep | None]:
        """The detector after one pair of readings, and the step they show (or None)."""
        moved = replace(self, wall_ms=wall_ms, monotonic_ms=monotonic_ms)
        if self.wall_ms is None:
            return moved, None
        size_ms = (wall_ms - self.wall_ms) - (monotonic_ms - self.monotonic_ms)
        if abs(size_ms) <= self.threshold_ms:
            return moved, None
        step = ClockStep(size_ms, self.wall_ms, wall_ms)
        if size_ms > 0:
            return replace(moved, forward=self.forward + 1, last=step), step
        return replace(moved, backward=self.backward + 1, last=step), step
