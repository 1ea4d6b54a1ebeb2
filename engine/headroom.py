"""The writer's headroom: how much one group commit may take, and how much may queue, in
time rather than in operations, so that under overload the producers wait and the fires
do not.

The writer stages a commit's fires first, then its queued operations. A commit of
`max_group_ops` sends takes as long as those sends cost, and every timer falling due
meanwhile waits for it: at a rate the writer cannot keep up with, the queue is always
full, every commit is that large, and fire lateness becomes the length of a commit (a
second and more on a slow machine) while producers are answered no later than before.
So the writer measures what a unit of its work costs (a queued operation's weight, or a
fired timer) and:

    take   ≤ commit_budget_ms / cost      a commit's operations: fires wait at most about
                                           that long behind them
    queue  ≤ queue_budget_ms / cost       beyond, a send is refused (Overloaded, which the
                                           server answers RESOURCE_EXHAUSTED): a producer
                                           waits at most about that long for the writer

each clamped to the fixed bounds (`max_group_ops`, `max_queued_ops`) and never below one
operation taken, or one commit's worth queued. The cost is a moving average of the
commits' measured seconds over their units, so it follows the machine's speed from hour
to hour, which no fixed count can. Pure: the writer reports each commit's figures and
asks for the limits; nothing here reads a clock.
"""

from __future__ import annotations

from dataclasses import dataclass

SMOOTHING = 0.2  # weight of the newest commit in the moving average
FIRST_COST_S = 50e-6  # a unit's cost before any commit was measured: a slow send's
MIN_UNITS = 16  # commits this small are mostly fixed costs: they say little of a unit's


@dataclass
class Headroom:
    commit_budget_ms: int
    queue_budget_ms: int
    max_take: int  # max_group_ops
    max_queued: int  # max_queued_ops
    cost_s: float = FIRST_COST_S  # seconds a unit of work, averaged over recent commits
    # The limits for the cost now, kept as plain attributes: the writer reads them at
    # every submit and commit, and they change only when a commit is measured.
    take: int = 0  # the operations' weight the next commit may take (at least one)
    queue: int = 0  # the queued weight beyond which a new send is refused

    def __post_init__(self) -> None:
        self._update()

    def committed(self, units: int, seconds: float) -> None:
        """A commit of `units` (operation weights plus fired timers) took `seconds`."""
        if units < MIN_UNITS or seconds <= 0:
            return
        self.cost_s += SMOOTHING * (seconds / units - self.cost_s)
        self._update()

    def _update(self) -> None:
        self.take = _clamp(self.commit_budget_ms / 1000 / self.cost_s, 1, self.max_take)
        floor = min(self.take, self.max_queued)
        self.queue = _clamp(self.queue_budget_ms / 1000 / self.cost_s, floor, self.max_queued)

    def queue_ms(self, weight: int) -> int:
        """About how long the writer needs for `weight` queued: for a refusal's message."""
        return round(weight * self.cost_s * 1000)


def _clamp(value: float, low: int, high: int) -> int:
    return max(low, min(high, int(value)))
