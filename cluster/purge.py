"""What a node does to its engine when a partition goes to another node: every timer of
the partition leaves it, scheduled ones cancelled, fired ones retired (acked), so the
engine neither fires nor delivers them again. Other partitions' timers stay as they are.
A timer that fires between the two scans is caught by the delivery gate instead
(timerwheel.cluster.gate), which hands out only the node's own partitions.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import structlog

from timerwheel.cluster.partitions import partition_of

if TYPE_CHECKING:
    from timerwheel.engine.engine import Engine

log = structlog.get_logger("timerwheel.cluster")

END_OF_TIME_MS = 1 << 47  # beyond any deliver time a timer may have (year 6429)
PAGE = 1_000


def purge_partition(engine: Engine, partition: int, count: int) -> None:
    """Retire `partition`'s timers (of `count` partitions) from `engine`."""
    for topic, _, _ in engine.topics():
        token = ""
        while True:
            timers, token = engine.list_pending(topic, 0, END_OF_TIME_MS, PAGE, token, False)
            for timer in timers:
                if partition_of(timer.message_id, count) == partition:
                    with contextlib.suppress(Exception):
                        engine.cancel(timer.message_id)
            if not token:
                break
        after = 0
        while True:
            rows = engine.fetch_deliveries(topic, after, PAGE)
            if not rows:
                break
            after = rows[-1].seq
            mine = [r.message_id for r in rows if partition_of(r.message_id, count) == partition]
            if mine:
                engine.ack(topic, mine)


def purge_until_done(
    engine: Engine, partition: int, count: int, closing: Callable[[], bool]
) -> None:
    """`purge_partition`, retried until it succeeds (a writer refusing for a moment must
    not leave the partition's timers in the engine), unless the node is stopping
    (`closing()`: its engine closes; the next start begins empty)."""
    for attempt in range(1, 100):
        if closing():
            return
        try:
            purge_partition(engine, partition, count)
            return
        except Exception as error:
            log.error("cluster_purge_failed", partition=partition, error=repr(error))
            time.sleep(min(0.05 * attempt, 1.0))
