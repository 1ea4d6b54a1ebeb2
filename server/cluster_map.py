"""The ClusterMap answer (docs/cluster.md, "ClusterMap and routing"): the partition count
and each partition's owner, as the node asked last read the leases
(`timerwheel.cluster.node.ClusterNode.cluster_map`). `timerwheel.Client` routes id-keyed
calls by it.

A single node (not in cluster mode) answers `cluster` false, one partition, owned by the
node asked (empty address): a client then routes nothing, and one map serves both modes
without a FAILED_PRECONDITION to tell apart from a real refusal.
"""

from __future__ import annotations

from typing import Any

from timerwheel.v1 import timerwheel_pb2 as pb

SINGLE_NODE = pb.ClusterMapResponse(
    cluster=False, partitions=1, owners=[pb.PartitionOwner(partition=0)]
)


def cluster_map_response(cluster: dict[str, Any] | None) -> pb.ClusterMapResponse:
    """The answer from a node's cluster map; None: a single node."""
    if cluster is None:
        return SINGLE_NODE
    owners = [
        pb.PartitionOwner(
            partition=row["partition"], node=row["owner"].split("/", 1)[0],
            holder=row["owner"], address=row["address"], epoch=row["epoch"],
        )
        for row in cluster["map"]
    ]  # fmt: skip
    return pb.ClusterMapResponse(
        cluster=True, partitions=cluster["partitions"], node=cluster["node"],
        address=cluster["address"], owners=owners,
    )  # fmt: skip
