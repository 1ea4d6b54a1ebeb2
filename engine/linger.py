"""When the writer must wake for what is queued: the verdicts, not the waiting.

An op without a linger (a send, a cancel, an ack: somebody waits on it) wakes the writer
at once. An op with one (`Op.linger_ms`: delivery trace events, which nobody waits on)
only needs to be committed by a deadline, its arrival plus its linger. Under load the
writer commits every millisecond for fires anyway, and such an op goes into that commit
instead of causing one of its own; at moderate send rates that halves the writer's
commits (docs/lab-log.md has the runs). The writer wakes early for it only when it
would otherwise sleep past the deadline.

`Lingering` keeps the earliest deadline of the lingering ops queued. It reads no clock:
the writer passes the time in, under its own lock.
"""

from __future__ import annotations


class Lingering:
    def __init__(self) -> None:
        self.due_ms: int | None = None  # a commit is due by then; None: nothing lingers

    def queued(self, now_ms: int, linger_ms: int) -> None:
        """An op that may wait `linger_ms` was queued at `now_ms`."""
        due_ms = now_ms + linger_ms
        if self.due_ms is None or due_ms < self.due_ms:
            self.due_ms = due_ms

    def wakes(self, asleep_until_ms: int | None) -> bool:
        """Whether a writer asleep until `asleep_until_ms` (None: awake, it will look at
        the queue before it sleeps) must be woken to meet the deadline."""
        return (
            self.due_ms is not None
            and asleep_until_ms is not None
            and asleep_until_ms > self.due_ms
        )

    def sleep_until_ms(self, wake_ms: int) -> int:
        """The writer's wake-up time, `wake_ms` (next fire, cascade or sweep) or the
        deadline, whichever is first."""
        return wake_ms if self.due_ms is None else min(wake_ms, self.due_ms)

    def taken(self, queue_empty: bool) -> None:
        """The writer took ops off the queue; once it is empty nothing lingers. With ops
        left (a group is bounded by `max_group_ops`) the deadline stays: the writer may
        wake a little early, never late."""
        if queue_empty:
            self.due_ms = None
