"""One wheel type; the hour, minute and second wheels are instances of it.

A wheel level is a partition of absolute time into equal slots: slot `n` of a level with
`slot_ms = w` is the half-open range [n*w, (n+1)*w) of deliver_at_ms. Because keys are
absolute times there is no wrap-around and no "rounds" counter as in a classic hashed
wheel: a timer a year away simply sits in a far hour slot until the cascade reaches it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Wheel:
    name: str
    slot_ms: int

    def slot_start_ms(self, t_ms: int) -> int:
        """Start of the slot that holds `t_ms`."""
        return t_ms - t_ms % self.slot_ms

    def next_boundary_after_ms(self, t_ms: int) -> int:
        """The first slot boundary strictly after `t_ms`."""
        return self.slot_start_ms(t_ms) + self.slot_ms

    def slot_range_ms(self, t_ms: int) -> tuple[int, int]:
        start = self.slot_start_ms(t_ms)
        return start, start + self.slot_ms


SECOND_WHEEL = Wheel("second", 1_000)
MINUTE_WHEEL = Wheel("minute", 60_000)
HOUR_WHEEL = Wheel("hour", 3_600_000)

# Lowest level first: timers fire out of LEVELS[0] and cascade downwards from LEVELS[-1].
LEVELS: tuple[Wheel, ...] = (SECOND_WHEEL, MINUTE_WHEEL, HOUR_WHEEL)
