"""Where a partition goes: the live nodes a node knows of, and when it may take a
partition or should hand one on (docs/cluster.md, "What a node does now": Placement).

A partition goes first to its preferred live node (rendezvous hashing: the highest crc32
of "<node>:<partition>", `timerwheel.cluster.partitions.preferred_node`). When the node
that lost it was its preferred node, its warm standby (`standby`, after that owner) takes
it once the lease has been absent for a renewal interval: the lost owner may still be
listed for a while (the registry's TTL, or a registry that cannot be read during NATS's
elections), and waiting on it is the grace; an owner that is alive and only renewed late
reads and creates again within a tick, so it keeps its partition rather than see it
move. Any other node takes it once it has been without an owner for the grace.
An owner hands a partition to its preferred node once that node has been up for the
grace, one partition per renewal interval, so a node that joins or restarts gets its
share; a node that took a partition from its preferred owner counts that owner as up only
from a registry read after the take, so a lost owner still listed never gets it back.
Nodes register in the node bucket every renewal; the bucket's TTL drops a node that
stopped.

Each node's registry entry also says the newest log version its build writes and reads
(`registry_value`), so a node can refuse what older nodes could not read back: a
recurring series (version 2) while any live node is still of version 1, mid-upgrade
(docs/cluster.md, "Upgrading a cluster"). A build from before the entry had a version
put its address alone: version 1.

Pure state over a monotonic clock the caller passes, except `register` (one put, one key
listing and one get a live node on the node bucket).
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from timerwheel.cluster.partitions import preferred_node

NEVER_MS = -(10**12)


def registry_value(address: str, log_version: int) -> bytes:
    """What a node puts under its name in the node bucket."""
    return json.dumps({"address": address, "log_version": log_version}).encode()


def registry_version(data: bytes) -> int:
    """The log version a registry entry names; 1 for an entry of a build that put its
    address alone."""
    try:
        found = json.loads(data)
    except ValueError:
        return 1
    if not isinstance(found, dict):
        return 1
    return int(found.get("log_version", 1))


class Placement:
    def __init__(self, name: str, renew_every_ms: int, grace_ms: int) -> None:
        self.name = name
        self.renew_every_ms = renew_every_ms
        self.grace_ms = grace_ms
        self.live_nodes: set[str] = {name}
        self._seen_at: dict[str, int] = {}  # node -> when this node first saw it live
        self._absent_since: dict[int, int] = {}  # partition -> when found without an owner
        self._last_hand_off_ms = NEVER_MS
        self._refused_until: dict[int, int] = {}  # partition -> not taken before (its snapshot)
        self._last_owner: dict[int, str] = {}  # partition -> the node last seen holding it
        self.log_versions: dict[str, int] = {}  # live node -> its build's log version

    async def register(
        self, nodes_kv: Any, address: str, now_ms: int, log_version: int = 1
    ) -> None:
        """Put this node in the registry and read who else is there, with each one's log
        version (failures ignored: the next renewal tries again, and the last read stays)."""
        try:
            await nodes_kv.put(self.name, registry_value(address, log_version))
            keys = await nodes_kv.keys()
            self.live_nodes = set(keys) | {self.name}
            for name in self.live_nodes:
                self._seen_at.setdefault(name, now_ms)
            for name in list(self._seen_at):
                if name not in self.live_nodes:
                    del self._seen_at[name]
            self.log_versions = {
                name: version
                for name, version in self.log_versions.items()
                if name in self.live_nodes
            }
            self.log_versions[self.name] = log_version
        except Exception:
            return
        for name in sorted(self.live_nodes - {self.name}):
            try:  # one a replica has not yet applied (or expired since) keeps its last read
                entry = await nodes_kv.get(name)
                self.log_versions[name] = registry_version(entry.value or b"")
            except Exception:
                continue

    def older_nodes(self, log_version: int) -> list[str]:
        """The live nodes known to run a build whose log version is below `log_version`."""
        return sorted(
            name
            for name, version in self.log_versions.items()
            if name in self.live_nodes and version < log_version
        )

    def preferred(self, partition: int) -> str:
        """The live node a partition goes to first (a node joining or leaving moves only
        its own share)."""
        return preferred_node(partition, self.live_nodes)

    def standby(self, partition: int, owner: str | None) -> str:
        """The node that would take the partition next: the first live node in its
        rendezvous order that is not its owner (the preferred node while it has none)."""

        def rank(name: str) -> tuple[int, str]:
            return -zlib.crc32(f"{name}:{partition}".encode()), name

        ranked = sorted(self.live_nodes, key=rank)
        return next((name for name in ranked if name != owner), self.name)

    def owner_seen(self, partition: int, owner: str) -> None:
        """A read of the partition's lease found `owner` holding it."""
        self._last_owner[partition] = owner

    def warm(self, partition: int) -> bool:
        """Is this node the warm standby of a partition whose last owner seen is its
        preferred node (the owner this node would otherwise wait the grace for)."""
        last = self._last_owner.get(partition)
        if last is None or last == self.name or last != self.preferred(partition):
            return False
        return self.standby(partition, last) == self.name

    def read(self, partition: int, owner_found: bool, now_ms: int) -> None:
        """A read of the partition's lease answered: the grace runs from the first read
        that found no owner."""
        if owner_found:
            self._absent_since.pop(partition, None)
        else:
            self._absent_since.setdefault(partition, now_ms)

    def held(self, partition: int) -> None:
        """This node holds the lease: the next absence starts anew. Taken from its
        preferred node (which lost it: a hand-off goes only to the preferred node), that
        node is not up until a registry read after now lists it again: its entry may
        outlive it, and a hand-off back to it would leave the partition without an owner."""
        self._absent_since.pop(partition, None)
        last = self._last_owner.get(partition)
        if last is not None and last != self.name and last == self.preferred(partition):
            self._seen_at.pop(last, None)
        self._last_owner[partition] = self.name

    def may_take(self, partition: int, now_ms: int) -> bool:
        """May this node create the partition's lease now (it was found absent): it is the
        preferred node; or the warm standby after the preferred node lost it (`warm`) and
        the partition has been without an owner for a renewal interval; or it has been
        without one for the grace. Never while it refuses it."""
        if now_ms < self._refused_until.get(partition, now_ms):
            return False
        if self.preferred(partition) == self.name:
            return True
        since = self._absent_since.get(partition, now_ms)
        if self.warm(partition):
            return now_ms - since >= self.renew_every_ms
        return now_ms - since >= self.grace_ms

    def should_hand_off(self, partition: int, now_ms: int) -> bool:
        """Give an owned partition to its preferred node once that node has been up for the
        grace, one partition per renewal interval."""
        preferred = self.preferred(partition)
        if preferred == self.name:
            return False
        if now_ms - self._last_hand_off_ms < self.renew_every_ms:
            return False
        return now_ms - self._seen_at.get(preferred, now_ms) >= self.grace_ms

    def refuse(self, partition: int, until_ms: int) -> None:
        """This node found the partition's snapshot invalid: it takes it again only after
        `until_ms` (another node may find it readable, or an operator restore it)."""
        self._refused_until[partition] = until_ms

    def handing_off(self, now_ms: int) -> None:
        self._last_hand_off_ms = now_ms

    def handed_off(self, partition: int, now_ms: int) -> None:
        """The lease was given back: the grace starts now, for this node too."""
        self._absent_since[partition] = now_ms
