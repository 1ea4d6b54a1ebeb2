"""Admission by the firing loop's headroom: refuse sends while fires run late, or while
the fires due ahead and the sends would leave them no headroom.

Two rules, either refuses (`Admission`): the fire-lag rule (`FireLagGate`, below),
which reacts to fires already late, and admission by due load (`DueLoadGate`, further
down, where its own comment says why it is needed beside the first), which refuses
before they are.

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

from collections import Counter
from heapq import nlargest

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


# == admission by due load =============================================================
# The fire-lag rule above reacts once fires are already late: under a sustained overload
# the timers it admitted at full rate before any fell due come due later, faster than the
# process can fire them beside the sends it still serves. This rule looks ahead instead:
# it refuses sends while the fires the engine already holds for the coming seconds, plus
# the sends at their present rate, would take more of the process than its budget.
#
#   projected CPU-s per s = fire_s * due_per_s + send_s * send_rate_per_s
#
#   due_per_s   what falls due a second in the next HORIZON_S seconds: the
#               BURST_SECONDS-th busiest of those seconds (DueHorizon), so a burst due
#               in a few seconds (a midnight batch) can still be stored; the fire-lag
#               rule guards its drain. A sustained overload loads every second alike.
#   send_rate   committed sends a second, smoothed (RATE_WEIGHT a sample): the gate is
#               open or shut, so the smoothing turns its duty cycle into the admitted rate
#   fire_s, send_s   CPU seconds a fire (with its delivery and ack) and a send take the
#               process, measured by the engine itself (CostModel), not constants
#
# Closing: projected above `budget_pct` of a core, once the fires due ahead take at
# least QUIET_PCT of that budget (with none due, sends at full speed harm no fire, and a
# producer loading timers for later is not slowed before they build a due load).
# Reopening: at or under RESUME_PCT of it. Re-decided once a sample (SAMPLE_MS), which
# is the retry-after.

SAMPLE_MS = 100  # how often the engine measures and re-decides
HORIZON_S = 64  # seconds ahead whose due counts are kept
BURST_SECONDS = 8  # due_per_s is the 8th busiest second of the horizon
RATE_WEIGHT = 0.2  # of the newest sample in the smoothed send rate
COST_DECAY = 0.95  # weight a cost sample keeps a sample later (a few seconds of memory)
RIDGE = 0.005  # pull toward equal costs, where sends and fires move together
MIN_SAMPLE_MESSAGES = 100  # a sample of fewer tells idle overhead, not a message's cost
RESUME_PCT = 90  # of the budget, to reopen
QUIET_PCT = 10  # of the budget: fires due ahead below it never close the gate
CAPACITY_WEIGHT = 0.2  # of a saturated sample's CPU in the capacity (DueLoadGate)
CAPACITY_RECOVERY = 0.05  # cores a second the capacity climbs back toward one core
MIN_CAPACITY = 0.1  # cores: a stalled sample must not shut admission for good
MAX_ADMIT_DUE_LOAD_PCT = 1_000


class DueHorizon:
    """Timers due a second over the next HORIZON_S seconds, kept in memory from the
    sends the writer committed (one `add` a commit). Cancels and reschedules are not
    taken off (the projection errs high for a minute at most); timers sent further ahead
    than the horizon are not counted (the fire-lag rule covers their cascades)."""

    __slots__ = ("_counts",)

    def __init__(self) -> None:
        self._counts: Counter[int] = Counter()

    def add(self, deliver_times_ms: list[int], now_ms: int) -> None:
        if not deliver_times_ms:
            return
        end_ms = (now_ms // 1000 + HORIZON_S) * 1000
        # per send op, not per staged key: one pass, then one C-level count
        self._counts.update([t // 1000 for t in deliver_times_ms if t < end_ms])

    def due_per_s(self, now_ms: int) -> int:
        """The BURST_SECONDS-th largest count from this second on; past seconds are
        dropped."""
        now_s = now_ms // 1000
        counts = self._counts
        for second in [s for s in counts if s < now_s]:
            del counts[second]
        if len(counts) < BURST_SECONDS:
            return 0
        return nlargest(BURST_SECONDS, counts.values())[-1]


class CostModel:
    """CPU seconds a send and a fire cost, from samples (cpu_s, sends, fires): a least
    squares fit of cpu_s = send_s * sends + fire_s * fires, each sample's weight decaying
    by COST_DECAY a sample. Under a steady load sends and fires move together and the
    two are not separable; a small ridge pulls them toward the pooled cost a message
    then, which is what the verdict needs (it weighs them by near-equal counts)."""

    __slots__ = ("_ff", "_fy", "_sf", "_ss", "_sy", "fire_s", "send_s")

    def __init__(self) -> None:
        self._ss = self._sf = self._ff = self._sy = self._fy = 0.0
        self.send_s: float | None = None  # None until a sample counted
        self.fire_s: float | None = None

    def observe(self, cpu_s: float, sends: int, fires: int) -> None:
        if sends + fires < MIN_SAMPLE_MESSAGES or cpu_s <= 0:
            return
        d = COST_DECAY
        self._ss = self._ss * d + sends * sends
        self._sf = self._sf * d + sends * fires
        self._ff = self._ff * d + fires * fires
        self._sy = self._sy * d + sends * cpu_s
        self._fy = self._fy * d + fires * cpu_s
        ss, sf, ff, sy, fy = self._ss, self._sf, self._ff, self._sy, self._fy
        pooled = (sy + fy) / (ss + 2 * sf + ff)  # one cost for both
        ridge = RIDGE * (ss + ff)
        a, b, c = ss + ridge, sf, ff + ridge
        det = a * c - b * b
        send_s = (c * (sy + ridge * pooled) - b * (fy + ridge * pooled)) / det
        fire_s = (a * (fy + ridge * pooled) - b * (sy + ridge * pooled)) / det
        floor = pooled / 10  # noise must not make either free
        self.send_s, self.fire_s = max(send_s, floor), max(fire_s, floor)


class DueLoadGate:
    """Whether sends are admitted, from the due load ahead and the measured costs.

    The budget is a share of the CPU the process gets (`capacity`, in cores): one core
    until the fires run late (the fire-lag rule refusing: the process is saturated), then
    what the process's CPU clock advanced by while they did, as neighbours on the same
    cores leave it less; between such samples it climbs back toward one core by
    CAPACITY_RECOVERY a second, and never stays under what the process was seen using."""

    __slots__ = ("_cpu_s", "_last_ms", "budget_pct", "capacity", "costs", "load_pct",
                 "refusing", "send_rate")  # fmt: skip

    def __init__(self, budget_pct: int) -> None:
        self.budget_pct = budget_pct
        self.costs = CostModel()
        self.send_rate = 0.0
        self.capacity = 1.0  # cores the process gets when saturated
        self.load_pct = 0  # the latest projection, in % of `capacity`
        self.refusing = False
        self._last_ms: int | None = None
        self._cpu_s = 0.0

    def sample(
        self, now_ms: int, cpu_s: float, sends: int, fires: int, due_per_s: int,
        saturated: bool = False,
    ) -> bool:  # fmt: skip
        """One sample: the process's CPU clock now (s), the sends committed and timers
        fired since the last one, the due load ahead (DueHorizon), and whether the fires
        ran late meanwhile (the fire-lag rule refusing). Returns `refusing`."""
        last_ms, last_cpu_s = self._last_ms, self._cpu_s
        self._last_ms, self._cpu_s = now_ms, cpu_s
        if last_ms is None or now_ms <= last_ms or not self.budget_pct:
            return self.refusing
        interval_s = (now_ms - last_ms) / 1000
        self._learn_capacity((cpu_s - last_cpu_s) / interval_s, interval_s, saturated)
        self.costs.observe(cpu_s - last_cpu_s, sends, fires)
        self.send_rate += RATE_WEIGHT * (sends / interval_s - self.send_rate)
        send_s, fire_s = self.costs.send_s, self.costs.fire_s
        if send_s is None or fire_s is None:
            return self.refusing
        fires_pct = fire_s * due_per_s * 100 / self.capacity
        self.load_pct = round(fires_pct + send_s * self.send_rate * 100 / self.capacity)
        if self.load_pct > self.budget_pct and fires_pct * 100 >= self.budget_pct * QUIET_PCT:
            self.refusing = True
        elif self.load_pct * 100 <= self.budget_pct * RESUME_PCT:
            self.refusing = False
        return self.refusing

    def _learn_capacity(self, used: float, interval_s: float, saturated: bool) -> None:
        if saturated:
            self.capacity += CAPACITY_WEIGHT * (max(used, MIN_CAPACITY) - self.capacity)
        elif self.capacity < 1.0:
            self.capacity = min(self.capacity + CAPACITY_RECOVERY * interval_s, 1.0)
        self.capacity = max(self.capacity, used if not saturated else 0.0)

    def refused(self) -> AdmissionRefused | None:
        return due_load_refused(self.load_pct, self.budget_pct) if self.refusing else None


def due_load_refused(load_pct: int, budget_pct: int) -> AdmissionRefused:
    """The due-load rule's refusal; it re-decides a sample later, so retry no sooner."""
    return AdmissionRefused(
        f"due_load_pct={load_pct}: the fires due in the next seconds and the sends would "
        f"take more than admit_due_load_pct={budget_pct} of the CPU the process gets; "
        "sends are refused "
        "until there is room, retry with backoff",
        SAMPLE_MS,
    )


def admit_due_load_problem(value: object) -> str | None:
    """What is wrong with an `admit_due_load_pct` setting, or None."""
    if type(value) is not int or not 0 <= value <= MAX_ADMIT_DUE_LOAD_PCT:
        return (
            f"admit_due_load_pct={value!r}: must be 0..{MAX_ADMIT_DUE_LOAD_PCT} "
            "(% of a core; 0: sends are never refused for the due load)"
        )
    return None


class Admission:
    """Both rules: sends are refused while either refuses. The engine's gate (its
    `refusing` and `refused()` are read by request threads; `observe` and `sample` are
    the writer's)."""

    __slots__ = ("due", "lag")

    def __init__(self, admit_fire_lag_ms: int, admit_due_load_pct: int) -> None:
        self.lag = FireLagGate(admit_fire_lag_ms)
        self.due = DueLoadGate(admit_due_load_pct)

    @property
    def refusing(self) -> bool:
        return self.lag.refusing or self.due.refusing

    @property
    def lag_ms(self) -> int:
        return self.lag.lag_ms

    def observe(self, now_ms: int, lag_ms: int) -> bool:
        """The fire-lag rule's observation (FireLagGate.observe); returns `refusing`."""
        return self.lag.observe(now_ms, lag_ms) or self.due.refusing

    def refused(self) -> AdmissionRefused | None:
        """The error a send meets now (the fire-lag rule's first), or None: admitted."""
        lag, due = self.lag, self.due
        if not (lag.refusing or due.refusing):  # every send asks: the cheap answer first
            return None
        return lag.refused() or due.refused()

    def refusal(self) -> str | None:
        refused = self.refused()
        return None if refused is None else str(refused)
