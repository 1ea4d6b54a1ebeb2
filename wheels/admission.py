"""Admission by the firing loop's headroom: refuse sends while fires run late.

Why here, and why by lateness
-----------------------------
A send costs the server far more before it reaches the writer (decoding is cheap,
validation and record encoding are not) than the writer spends on it, and in one process
all of it holds the GIL the firing loop needs. Under overload the writer's queue never
fills: the requests being validated starve the loop first, and fires go late by
seconds while producers' windows hold the excess. So the signal is the loop's own
lateness, and the refusal happens before any validation (`timerwheel.server.service`
asks the gate first thing in Send and SendBatch). Acks, cancels, nacks and reads are
never refused by it: they relieve the load.

The signal
----------
Every writer iteration reports one observation (`observe`): how late the fires it
staged ran against their due times (now minus the earliest due time it fired, from the
second wheel or a late cascade), or 0 when nothing was due, since a loop that found
nothing due is not behind. Timers sent already due fire inside their send and are not
observed: a deliver time in the past is the producer's choice, not the loop's lag.

The decision, with hysteresis
-----------------------------
::

            lag > admit_ms on CONFIRM consecutive observations
     ADMIT ---------------------------------------------------> REFUSE
       ^                                                           |
       |   lag <= admit_ms // 2, at least hold_ms (= admit_ms)     |
       +------------ after the last observation above admit_ms ----+

Closing needs CONFIRM late iterations in a row: one late commit (a pause, a
compaction) is followed by a prompt one once the loop is back, while a starved loop is
late on every commit. Reopening needs the loop well under the threshold (half of it),
and for a while: the producers held back return together, and a gate that reopened at
the first calm commit would flap. `admit_ms` 0 turns the gate off (the lag is still
kept, for the gauge).

Pure: the caller passes its `now_ms` (the writer's scheduler time) and the gate keeps
two fields that readers in other threads may read at any time (`refusing`, `lag_ms`).
"""

from __future__ import annotations

from timerwheel.wheels.domain import AdmissionRefused

CONFIRM = 2  # late observations in a row that close the gate
MAX_ADMIT_FIRE_LAG_MS = 60_000  # beyond, fires a minute late would still be "on time"


class FireLagGate:
    """Whether sends are admitted, from the firing loop's observed lag (module doc)."""

    __slots__ = ("_last_late_ms", "_late_in_row", "admit_ms", "hold_ms", "lag_ms",
                 "late_ms", "refusing", "resume_ms")  # fmt: skip

    def __init__(self, admit_ms: int) -> None:
        self.admit_ms = admit_ms
        self.resume_ms = admit_ms // 2
        self.hold_ms = hold_ms(admit_ms)
        self.refusing = False
        self.lag_ms = 0  # the latest observation
        self.late_ms = 0  # the latest observation above admit_ms: what a refusal names
        self._late_in_row = 0
        self._last_late_ms = 0

    def observe(self, now_ms: int, lag_ms: int) -> bool:
        """One writer iteration's lag; returns whether sends are refused now."""
        self.lag_ms = lag_ms
        if not self.admit_ms:
            return False
        if lag_ms > self.admit_ms:
            self._late_in_row += 1
            self._last_late_ms = now_ms
            self.late_ms = lag_ms
            if self._late_in_row >= CONFIRM:
                self.refusing = True
        else:
            self._late_in_row = 0
            if (
                self.refusing
                and lag_ms <= self.resume_ms
                and now_ms - self._last_late_ms >= self.hold_ms
            ):
                self.refusing = False
        return self.refusing

    def refusal(self) -> str | None:
        """Why a send is refused now (the figure and the setting), or None: admitted."""
        if not self.refusing:
            return None
        return refusal_message(self.late_ms, self.admit_ms)

    def refused(self) -> AdmissionRefused | None:
        """The error a send meets now, or None: admitted."""
        if not self.refusing:
            return None
        return refused(self.late_ms, self.admit_ms)


def hold_ms(admit_ms: int) -> int:
    """How long the gate stays closed after the last late observation, at least."""
    return admit_ms


def refused(lag_ms: int, admit_ms: int) -> AdmissionRefused:
    """The refusal of a send: its message, and when to try again. The gate reopens no
    sooner than its hold after the last late iteration, so a retry sooner than that is
    refused for certain; the clients double the wait on each refusal in a row
    (timerwheel/retries.py), so a wait this short is not a flood."""
    return AdmissionRefused(refusal_message(lag_ms, admit_ms), max(1, hold_ms(admit_ms)))


def refusal_message(lag_ms: int, admit_ms: int) -> str:
    """`lag_ms`: the latest lag above the threshold (the loop may have caught up since,
    within the hold)."""
    return (
        f"fire_lag_ms={lag_ms}: the firing loop is running behind its timers "
        f"(admit_fire_lag_ms={admit_ms}); sends are refused until it catches up, "
        "retry with backoff"
    )


def admit_fire_lag_problem(value: object) -> str | None:
    """What is wrong with an `admit_fire_lag_ms` setting, or None."""
    if type(value) is not int or not 0 <= value <= MAX_ADMIT_FIRE_LAG_MS:
        return (
            f"admit_fire_lag_ms={value!r}: must be 0..{MAX_ADMIT_FIRE_LAG_MS} "
            "(0: sends are never refused for the fires' lateness)"
        )
    return None
