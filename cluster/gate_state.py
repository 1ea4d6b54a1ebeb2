"""Whether a node may deliver now, and waking the delivery hub when it may again.

The node's engine holds every partition the node owns, so delivery is one switch for the
node: open only while `ClusterNode.closed_reason` names nothing (every lease it holds is
OWN, no takeover restoring, no partition leaving the engine). The lease loop calls `check`
every tick; the delivery gate (`timerwheel.cluster.gate.DeliveryGate`) reads `open` at
every fetch and calls `starved` when it found the switch closed, so the next tick that
finds it open wakes the hub's fired-listeners for every topic with fired messages:
delivery resumes where it stopped.

`stats` counts what the switch did, on the lease loop's ticks: how often it closed, for
how long in all and at most, and why (the reason the closing tick found). A closing is
logged when it ends (`cluster_delivery_reopened`), so a node's log says how long its
deliveries waited and for what.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

log = structlog.get_logger("timerwheel.cluster")


@dataclass
class GateStats:
    """What the switch did since the node started (read by metrics, logs and benches)."""

    closures: int = 0
    closed_ms: int = 0  # closings that ended, summed
    longest_closed_ms: int = 0
    refused_fetches: int = 0  # fetches that found the switch closed (`starved`)
    reasons: dict[str, int] = field(default_factory=dict)  # closings by their reason

    def as_dict(self) -> dict:
        return {
            "closures": self.closures, "closed_ms": self.closed_ms,
            "longest_closed_ms": self.longest_closed_ms,
            "refused_fetches": self.refused_fetches, "reasons": dict(self.reasons),
        }  # fmt: skip


class GateState:
    def __init__(
        self,
        closed_reason: Callable[[], str | None],
        ready_topics: Callable[[], list[str]],
        now_ms: Callable[[], int],
    ) -> None:
        self._closed_reason = closed_reason
        self._ready_topics = ready_topics
        self._now_ms = now_ms
        self._listeners: list[Callable[[list[str]], None]] = []
        self._open = True
        self._starved = False
        self._lock = threading.Lock()
        self.stats = GateStats()
        self._closed_at_ms: int | None = None  # when the current closing began
        self._closed_for = ""

    def check(self) -> None:
        reason = self._closed_reason()
        self._note(reason)
        self.set(reason is None)
        if self._starved and self.open:  # a fetch was refused in a brief lapse
            self._starved = False
            self._wake_hub()

    def starved(self) -> None:
        """A fetch found the gate closed (perhaps only for a moment, between two ticks of
        the lease loop): the next tick that finds it open wakes the hub."""
        self._starved = True
        self.stats.refused_fetches += 1

    def set(self, open_: bool, reason: str = "") -> None:
        if not open_ and reason:
            self._note(reason)
        with self._lock:
            changed = open_ != self._open
            self._open = open_
        if changed:
            log.info("cluster_delivery", open=open_)
            if open_:
                self._wake_hub()

    def _note(self, reason: str | None) -> None:
        """Count a closing when it begins and its length when it ends."""
        now = self._now_ms()
        if reason is not None and self._closed_at_ms is None:
            self._closed_at_ms, self._closed_for = now, reason
            self.stats.closures += 1
            self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1
        elif reason is None and self._closed_at_ms is not None:
            closed_ms = now - self._closed_at_ms
            self._closed_at_ms = None
            self.stats.closed_ms += closed_ms
            self.stats.longest_closed_ms = max(self.stats.longest_closed_ms, closed_ms)
            log.info("cluster_delivery_reopened", lasted_ms=closed_ms, reason=self._closed_for,
                     **self.stats.as_dict())  # fmt: skip

    def closed_now_ms(self) -> int:
        """How long the current closing has lasted (0 while open)."""
        since = self._closed_at_ms
        return 0 if since is None else self._now_ms() - since

    @property
    def open(self) -> bool:
        """Read at every fetch, on the lease clock: a node resumed after a pause must not
        deliver before its lease loop has run again."""
        return self._open and self._closed_reason() is None

    def add_listener(self, listener: Callable[[list[str]], None]) -> None:
        self._listeners.append(listener)

    def _wake_hub(self) -> None:
        """Tell the hub's listeners which topics have fired messages. A failure to read them
        is logged and the wake left to the next tick: raised here it would end the lease
        loop that calls `check` (every lease would expire), and lost it would leave the
        hub's dispatchers asleep over fired messages until the next fire."""
        try:
            topics = self._ready_topics()
        except Exception as error:
            log.error("cluster_delivery_wake_failed", error=repr(error))
            self._starved = True
            return
        for listener in list(self._listeners):
            listener(topics)
