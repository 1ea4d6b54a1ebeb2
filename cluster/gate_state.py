"""Whether a node may deliver now, and waking the delivery hub when it may again.

The node's engine holds every partition the node owns, so delivery is one switch for the
node: open only while `deliverable()` says so (every lease it holds is OWN, no takeover
restoring, no partition leaving the engine: `ClusterNode.deliverable`). The lease loop
calls `check` every tick; the delivery gate (`timerwheel.cluster.gate.DeliveryGate`)
reads `open` at every fetch and calls `starved` when it found the switch closed, so the
next tick that finds it open wakes the hub's fired-listeners for every topic with fired
messages: delivery resumes where it stopped.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

log = structlog.get_logger("timerwheel.cluster")


class GateState:
    def __init__(
        self, deliverable: Callable[[], bool], ready_topics: Callable[[], list[str]]
    ) -> None:
        self._deliverable = deliverable
        self._ready_topics = ready_topics
        self._listeners: list[Callable[[list[str]], None]] = []
        self._open = True
        self._starved = False
        self._lock = threading.Lock()

    def check(self) -> None:
        self.set(self._deliverable())
        if self._starved and self.open:  # a fetch was refused in a brief lapse
            self._starved = False
            self._wake_hub()

    def starved(self) -> None:
        """A fetch found the gate closed (perhaps only for a moment, between two ticks of
        the lease loop): the next tick that finds it open wakes the hub."""
        self._starved = True

    def set(self, open_: bool) -> None:
        with self._lock:
            changed = open_ != self._open
            self._open = open_
        if changed:
            log.info("cluster_delivery", open=open_)
            if open_:
                self._wake_hub()

    @property
    def open(self) -> bool:
        """Read at every fetch, on the lease clock: a node resumed after a pause must not
        deliver before its lease loop has run again."""
        return self._open and self._deliverable()

    def add_listener(self, listener: Callable[[list[str]], None]) -> None:
        self._listeners.append(listener)

    def _wake_hub(self) -> None:
        topics = self._ready_topics()
        for listener in list(self._listeners):
            listener(topics)
