"""Which partition a message id belongs to, and the ids a cluster makes (docs/cluster.md,
"Partitions and ids").

The partition count P is fixed when a cluster is created, so `partition_of` is a pure
function of the id and P that every node and every client computes alike:

1. `<series id>#<n>` (an occurrence of a recurring series) goes where its series is, so
   the Ack of an occurrence reaches the partition that fired it. `#` is never in a
   client-chosen id (wheels/validation.py), so the split is unambiguous.
2. A cluster-made id, `<32 hex digits>.p<partition>`, names its partition (when below P).
3. Any other id goes to `crc32(id) mod P`: stable across machines and Python versions,
   which Python's salted `hash()` is not.

Why a suffix and not random bits re-drawn until the hash lands in the wanted partition:
that costs P hashes an id on average. Why at the end: ids still begin with their deliver
time, so a partition's records stay in deliver-time order in its RocksDB (decision 0005).
The single node's ids (32 hex digits, engine/ids.py) have no suffix and route by their
hash like any client id, so no existing id changes meaning; the suffix uses only
characters a client id may hold, so id validation is unchanged.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

from timerwheel.partitioning import CLUSTER_ID_RE
from timerwheel.partitioning import partition_of as partition_of  # re-exported

MAX_PARTITIONS = 4096  # far above any sensible count; bounds the suffix's digits
DEFAULT_PARTITIONS = 64

# The single node's server-made id (engine/ids.py) and the cluster's suffix; the pure
# function of an id's partition lives beside the client, which routes by it too.
_CLUSTER_ID_RE = CLUSTER_ID_RE
SUFFIX = ".p"


def check_partition_count(count: int) -> int:
    if not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"partition count {count}: must be 1 to {MAX_PARTITIONS}")
    return count


def with_partition(server_id: str, partition: int) -> str:
    """A server-made id (32 hex digits) as the cluster makes it for `partition`."""
    if not 0 <= partition < MAX_PARTITIONS:
        raise ValueError(f"partition {partition}: must be 0 to {MAX_PARTITIONS - 1}")
    return f"{server_id}{SUFFIX}{partition}"


def named_partition(message_id: str) -> int | None:
    """The partition a cluster-made id names, or None for any other id."""
    named = _CLUSTER_ID_RE.fullmatch(message_id.split("#", 1)[0])
    return int(named.group(1)) if named is not None else None


def stream_name(partition: int) -> str:
    """The partition's JetStream stream (names may not hold '.')."""
    return f"timerwheel-p{partition}"


def log_subject(partition: int) -> str:
    """Where the owner appends its group commits."""
    return f"tw.p{partition}.log"


def epoch_subject(partition: int) -> str:
    """Where each new owner writes its epoch marker; every append asserts its last sequence."""
    return f"tw.p{partition}.epoch"


def lease_key(partition: int) -> str:
    """The partition's key in the lease bucket."""
    return f"p{partition}"


def preferred_node(partition: int, nodes: Iterable[str]) -> str:
    """The node a partition goes to first among `nodes` (rendezvous hashing: the highest
    crc32 of "<node>:<partition>"), so a node joining or leaving moves only its own share."""
    return max(sorted(nodes), key=lambda name: zlib.crc32(f"{name}:{partition}".encode()))
