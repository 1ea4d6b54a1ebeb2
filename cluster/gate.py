"""What the delivery hub sees of a cluster node: the engine's fired messages, but only while
the node may deliver, and acks that reach the partition's log before they are answered.

`DeliveryGate` implements `FiredSource` explicitly, method by method. It hands out only
messages of partitions the node owns now (a message of a partition given up, fired by the
engine before the purge reached it, is retired instead), and nothing at all while the
node's gate is closed (a lease past its local deadline, a takeover restoring,
a partition being given up: `ClusterNode.deliverable`); the hub's cursors do not move
meanwhile, and when the gate opens the node tells the hub's fired-listeners about every
topic with fired messages, so delivery resumes where it stopped.
"""

from __future__ import annotations

from collections.abc import Iterable

from timerwheel.cluster import journal
from timerwheel.cluster.errors import NoOwner, NotOwner
from timerwheel.cluster.node import ClusterNode
from timerwheel.engine.api import FiredSource
from timerwheel.engine.engine import Engine
from timerwheel.engine.trace_ops import DeliveryEvents
from timerwheel.engine.writer import FiredListener
from timerwheel.store.fired_record import FiredRecord
from timerwheel.wheels.domain import DeliveryOptions
from timerwheel.wheels.settings import Settings


class DeliveryGate:
    def __init__(self, node: ClusterNode, engine: Engine) -> None:
        self._node = node
        self._engine = engine
        self.settings: Settings = engine.settings

    def now_ms(self) -> int:
        return self._engine.now_ms()

    def local_now_ms(self) -> int:
        return self._engine.local_now_ms()

    def add_fired_listener(self, listener: FiredListener) -> None:
        self._engine.add_fired_listener(listener)
        self._node.add_gate_listener(lambda topics: listener(set(topics)))

    def ready_topics(self) -> list[str]:
        return self._engine.ready_topics() if self._node.gate_open else []

    def fetch_deliveries(
        self, topic: str, after_seq: int, limit: int, max_bytes: int = 0
    ) -> list[FiredRecord]:
        if not self._node.gate_open:
            self._node.starved()  # the hub waits now: wake it when the gate is open again
            return []
        # held, not only OWN: a partition whose lease is past its deadline for a moment is
        # still this node's (its rows wait for the gate); only a partition given up is not
        owned = self._node.held_partitions()
        kept: list[FiredRecord] = []
        after = after_seq
        while len(kept) < limit:
            asked = limit - len(kept)
            rows = self._engine.fetch_deliveries(topic, after, asked, max_bytes)
            if not rows:
                break
            foreign = [
                r.message_id for r in rows if self._node.partition_of(r.message_id) not in owned
            ]
            if not foreign:
                kept.extend(rows)
                break
            # Fired here after the partition went to another node (the engine fires on while
            # the node gives it up): never delivered from here; retired, as the purge does.
            # Unless a takeover started since this fetch began: its restore fires rows of a
            # partition `owned` does not list yet. None starts while the lock is held, and
            # the gate is closed while one runs, so then nothing is retired or handed out.
            with self._node.retire_lock:
                if not self._node.gate_open:
                    self._node.starved()
                    return []
                owned = self._node.held_partitions()
                foreign = [i for i in foreign if self._node.partition_of(i) not in owned]
                if foreign:
                    self._engine.ack(topic, foreign)
            foreign_ids = set(foreign)
            kept.extend(r for r in rows if r.message_id not in foreign_ids)
            after = rows[-1].seq
            if len(rows) < asked:
                break
        if kept and not self._node.gate_open:
            # The gate closed while the engine was read (a lease past its deadline after a
            # pause, a takeover starting): what was read waits, the hub's cursor unmoved.
            self._node.starved()
            return []
        return kept

    def delivery_options_of(self, message_ids: list[str]) -> dict[str, DeliveryOptions]:
        return self._engine.delivery_options_of(message_ids)

    def ack(
        self, topic: str, message_ids: Iterable[str], first_deliveries: list[bytes] | None = None
    ) -> list[str]:
        """Retire in the engine, then log the acks of owned partitions before answering.
        An ack of a partition this node no longer owns stays local: the new owner delivers
        that message again (a duplicate, counted by consumers, never a loss)."""
        acked = self._engine.ack(topic, message_ids, first_deliveries)
        by_partition: dict[int, list[str]] = {}
        for message_id in acked:
            by_partition.setdefault(self._node.partition_of(message_id), []).append(message_id)
        futures = []
        for partition, ids in by_partition.items():
            try:
                futures.append(self._node.journal(partition, [journal.Acked(tuple(ids))]))
            except (NotOwner, NoOwner):
                continue
        self._node.wait_logged(futures)
        return acked

    def unacked(self) -> int:
        return self._engine.unacked()

    def dead_letter(self, topic: str, message_id: str, attempts: int, reason: str) -> bool:
        return self._engine.dead_letter(topic, message_id, attempts, reason)

    def record_trace(self, groups: list[DeliveryEvents]) -> bool:
        return self._engine.record_trace(groups)

    def delivery_attempts(self, message_ids: list[str]) -> dict[str, int]:
        return self._engine.delivery_attempts(message_ids)


def _is_a_fired_source(gate: DeliveryGate) -> FiredSource:
    return gate  # the type checker holds DeliveryGate to FiredSource, method by method
