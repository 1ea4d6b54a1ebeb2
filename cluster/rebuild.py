"""How a node rebuilds a partition's live timers when it takes the partition over: the
partition's log read and folded (`timerwheel.cluster.journal.Fold`), and what the
takeover is reported as (docs/cluster.md, "What a node does now").
"""

from __future__ import annotations

from dataclasses import dataclass

from timerwheel.cluster import journal
from timerwheel.cluster.nats_io import PartitionLog


@dataclass
class Takeover:
    partition: int
    epoch: int
    records: int
    live: int
    seconds: float
    at_ms: int


async def rebuild(partition_log: PartitionLog) -> journal.Fold:
    """The partition's live timers: its whole log, read through its last sequence now,
    folded."""
    through = await partition_log.last_sequence()
    records = await partition_log.read_log(0, through)
    fold = journal.Fold()
    for _, data in records:
        fold.apply(journal.decode(data))
    return fold
