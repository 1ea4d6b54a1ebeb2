"""Which partition of a cluster a message id belongs to: one pure function that every
node and every client computes alike (docs/cluster.md, "Partitions and ids";
`timerwheel.Client` routes by it, the nodes own by it through
`timerwheel.cluster.partitions`). It imports nothing but the standard library.

1. `<series id>#<n>` (an occurrence of a recurring series) goes where its series is.
2. `<scope>/<id>`, a client id as a scoped token's send stores it (decision 0012), goes
   where `<id>` goes: calls are forwarded and routed by the id the client sent, and the
   owner finds the stored one in that partition. Neither a scope nor a client id holds
   a `/`, so the split is unambiguous; no id stored before scopes had one.
3. A cluster-made id, `<32 hex digits>.p<partition>`, names its partition (when below P).
4. Any other id goes to `crc32(id) mod P`: stable across machines and Python versions.
"""

from __future__ import annotations

import re
import zlib

# The single node's server-made id (deliver time then 80 random bits) and the cluster's
# suffix. Canonical decimal only (no leading zeros), so one partition has one spelling.
CLUSTER_ID_RE = re.compile(r"[0-9A-F]{32}\.p(0|[1-9][0-9]{0,3})")


def partition_of(message_id: str, count: int) -> int:
    """The partition of `message_id` in a cluster of `count` partitions."""
    base = message_id.split("#", 1)[0].rpartition("/")[2]
    named = CLUSTER_ID_RE.fullmatch(base)
    if named is not None:
        partition = int(named.group(1))
        if partition < count:
            return partition
    return zlib.crc32(base.encode()) % count
