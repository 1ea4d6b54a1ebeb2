"""The fired, un-acked backlog and the engine's throughput counters, kept without scans.

    unacked = (ready entries found at open)
            + (fire sequences handed out since: the scheduler's fire_seq less its base
               and the sequences it reserved but did not use)
            - (messages taken out of the backlog since: acked, purged, dead-lettered,
               redriven off a dead-letter topic)

A send is refused while it is at `max_unacked` (`check`), so consumers that stopped
acking bound what the fires pile up. The per-topic counts (`by_topic`) feed the metrics'
gauges and the Topics call. Every thread may call in: the counters take one lock.
"""

from __future__ import annotations

import threading

from timerwheel.observability.gauges import UnackedByTopic
from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.scheduler import Scheduler


class Backlog:
    def __init__(self, scheduler: Scheduler, ready: dict[str, int], max_unacked: int) -> None:
        self._scheduler = scheduler
        self._fire_seq_base = scheduler.state.fire_seq
        self._base = sum(ready.values())
        self._max_unacked = max_unacked
        self.by_topic = UnackedByTopic(ready)
        self._lock = threading.Lock()
        self._acked = 0
        self._sent = 0  # messages of sends queued since start (Stats: sends_total)

    def sent(self, count: int) -> None:
        """`count` messages queued to be stored (counted in the caller's thread: a
        callback on the commit's future would run on the writer's side)."""
        with self._lock:
            self._sent += count

    def taken(self, topic: str, count: int) -> None:
        """`count` fired messages of `topic` left the backlog (acked, purged, moved)."""
        if not count:
            return
        with self._lock:
            self._acked += count
        self.by_topic.acked(topic, count)

    def unacked(self) -> int:
        state = self._scheduler.state
        fired = state.fire_seq - state.unused_fire_seqs - self._fire_seq_base
        with self._lock:
            return max(self._base + fired - self._acked, 0)

    def check(self) -> None:
        """Refuse sends (Overloaded) while the backlog is at `max_unacked`."""
        unacked = self.unacked()
        if unacked >= self._max_unacked:
            raise Overloaded(
                f"unacked={unacked}: the fired, un-acked backlog is at its limit "
                f"(max_unacked={self._max_unacked}); consumers must ack before "
                "more sends are accepted"
            )

    def throughput(self) -> dict[str, int]:
        """Counters since the engine started, for rates (the console's throughput chart)."""
        state = self._scheduler.state
        with self._lock:
            sent, acked = self._sent, self._acked
        fired = state.fire_seq - state.unused_fire_seqs - self._fire_seq_base
        return {"sends_total": sent, "fires_total": fired, "acks_total": acked}
