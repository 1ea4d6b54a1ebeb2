"""Whether a cluster node may deliver now: the delivery gate over its leases
(docs/cluster.md, "What a node does now"). `ClusterNode` mixes this in; the gate's own
state (open, closings, the hub's wake) is `timerwheel.cluster.gate_state.GateState`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from timerwheel.cluster.appender import monotonic_ms
from timerwheel.cluster.lease import LeaseView, Verdict

if TYPE_CHECKING:
    from timerwheel.cluster.appender import Appender
    from timerwheel.cluster.gate_state import GateState


class NodeGate:
    _closing: bool
    _taking: set[int]
    _purging: set[int]
    _views: dict[int, LeaseView]
    _owned: dict[int, Appender]
    _gate: GateState

    def deliverable(self) -> bool:
        """May this node deliver now: every lease it holds is OWN and no takeover is
        restoring (a partition whose deadline passed must not deliver, and one engine
        holds them all)."""
        return self.closed_reason() is None

    def closed_reason(self) -> str | None:
        """Why this node may not deliver now (`deliverable`), or None."""
        if self._closing:
            return "closing"
        if self._taking:
            return "takeover restoring"
        if self._purging:
            return "partition leaving"
        views = self._views
        for partition in list(self._owned):
            view = views.get(partition)
            if view is not None and view.held is None:
                # Its lease is gone (an answer showed another holder, say after a pause)
                # but `_lose` has not taken it out yet: the lease loop may await in
                # between, while its fired rows are still in the engine and listed held.
                return "lease lost"
        now = monotonic_ms()
        for view in list(views.values()):
            if view.held is not None and (verdict := view.verdict(now)) is not Verdict.OWN:
                return "lease past its deadline" if verdict is Verdict.STOP else "lease moving"
        return None

    def _check_gate(self) -> None:
        self._gate.check()

    def starved(self) -> None:
        """A fetch found the gate closed: the next tick that finds it open wakes the hub."""
        self._gate.starved()

    def _set_gate(self, open_: bool, reason: str = "") -> None:
        self._gate.set(open_, reason)

    @property
    def gate_stats(self) -> dict:
        """What the delivery gate did since the start (`GateState.stats`)."""
        return {**self._gate.stats.as_dict(), "closed_now_ms": self._gate.closed_now_ms()}

    @property
    def gate_open(self) -> bool:
        """Read at every fetch, on the lease clock (`GateState.open`)."""
        return self._gate.open

    def add_gate_listener(self, listener: Callable[[list[str]], None]) -> None:
        self._gate.add_listener(listener)
