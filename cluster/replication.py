"""How well each owned partition's stream is replicated, as JetStream reports it, and its
latest snapshot (docs/cluster.md, "Replication lag"; `timerwheel stats`, /metrics).

The owner of a partition reads its stream's info (`$JS.API.STREAM.INFO`) now and then:
the NATS server leading the stream, how many of its replicas are current (the leader
counts as one) and the largest lag of a follower, in stream operations; and the latest
snapshot pointer on `tw.p<N>.snap`: the sequence its snapshot holds the log through and
when JetStream stored the pointer (whoever took it: this node or an earlier owner). The
reads run as
a task of their own on the node's NATS loop, at most one round in flight and one round
every `EVERY_MS`, so a slow or unanswered read never holds up a lease renewal or an
append; the last answers are cached and read by Stats and /metrics without a call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from nats.js import errors as js_errors

from timerwheel.cluster.partitions import stream_name
from timerwheel.cluster.snapshot import Pointer, SnapshotInvalid, snap_subject

EVERY_MS = 5_000  # a round of stream-info reads at most this often
READ_TIMEOUT_S = 2.0  # one read; an unanswered one leaves the partition's row empty


@dataclass(frozen=True)
class Replication:
    stream_leader: str  # "" when the stream has no leader (an election is under way)
    replicas_current: int  # the leader and every follower JetStream calls current
    replica_lag: int  # the largest follower lag, in stream operations behind the leader
    snapshot_through: int = 0  # the latest snapshot's sequence (0: none, or not read)
    snapshot_at_ms: int = 0  # when JetStream stored its pointer (epoch ms; 0: none)


NOT_READ = Replication("", 0, 0)


def replication_of(info: Any) -> Replication:
    """A StreamInfo's cluster section as a `Replication` (a stream of one replica has no
    followers: the leader alone is current)."""
    cluster = getattr(info, "cluster", None)
    if cluster is None:
        return Replication("", 1, 0)  # not clustered: the one server is the whole stream
    leader = cluster.leader or ""
    followers = cluster.replicas or []
    current = (1 if leader else 0) + sum(
        1 for peer in followers if peer.current and not peer.offline
    )
    lag = max((peer.lag or 0 for peer in followers), default=0)
    return Replication(leader, current, lag)


class ReplicationWatch:
    """The cache of owned partitions' replication, refreshed off the lease loop's path."""

    def __init__(self, js: Any, every_ms: int = EVERY_MS) -> None:
        self._js = js
        self._every_ms = every_ms
        self._last_round_ms = -(10**12)
        self._round: asyncio.Task | None = None
        self._seen: dict[int, Replication] = {}

    def tick(self, now_ms: int, owned: Callable[[], Iterable[int]]) -> None:
        """Called by the lease loop each tick: start a round when one is due and none is
        in flight; never waits for it."""
        if self._round is not None and not self._round.done():
            return
        if now_ms - self._last_round_ms < self._every_ms:
            return
        self._last_round_ms = now_ms
        self._round = asyncio.ensure_future(self._read(sorted(owned())))

    async def _read(self, partitions: list[int]) -> None:
        answers = await asyncio.gather(
            *(self._read_one(p) for p in partitions), return_exceptions=True
        )
        seen = {}
        for partition, answer in zip(partitions, answers, strict=True):
            seen[partition] = answer if isinstance(answer, Replication) else NOT_READ
        self._seen = seen  # partitions no longer owned drop out with the round

    async def _read_one(self, partition: int) -> Replication:
        stream = stream_name(partition)
        info, snap = await asyncio.gather(
            asyncio.wait_for(self._js.stream_info(stream), READ_TIMEOUT_S),
            asyncio.wait_for(self._last_snapshot(stream, partition), READ_TIMEOUT_S),
        )
        return dataclasses.replace(replication_of(info), snapshot_through=snap[0],
                                   snapshot_at_ms=snap[1])  # fmt: skip

    async def _last_snapshot(self, stream: str, partition: int) -> tuple[int, int]:
        """(sequence, stored at epoch ms) of the partition's latest snapshot; (0, 0) before
        the first, or when its pointer does not read (the takeover reports that)."""
        try:
            found = await self._js.get_last_msg(stream, snap_subject(partition))
            pointer = Pointer.decode(found.data or b"")
        except (js_errors.NotFoundError, SnapshotInvalid):
            return 0, 0
        at_ms = int(found.time.timestamp() * 1000) if found.time is not None else 0
        return pointer.through, at_ms

    def of(self, partition: int) -> Replication:
        """The partition's last read replication; NOT_READ when this node has none."""
        return self._seen.get(partition, NOT_READ)

    def close(self) -> None:
        if self._round is not None:
            with contextlib.suppress(Exception):
                self._round.cancel()
