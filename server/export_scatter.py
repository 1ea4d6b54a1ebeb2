"""Export for the whole cluster: every node writes its own partitions (cluster mode,
docs/cluster.md, "Whole-cluster Export").

Each node's engine holds only the partitions it owns, and an export is files on the
machine that wrote them. An Export a node receives from a client is asked at once of
every other node that owns partitions (marked forwarded: each exports its own engine
into `out_dir` below its own export root, on its own machine), while this node exports
its own; the answer gathers one `ExportNode` row a node (its name, address, partitions
and its manifest's figures) and the sums. As for List and Count
(timerwheel.server.scatter, which runs this), the answer is given only when the nodes'
partitions cover every partition exactly once; otherwise UNAVAILABLE. The nodes that did
answer then have their part written: a retry needs another `out_dir` (theirs is no longer
empty), which the error says.

An export may take minutes, so a node is asked for three quarters of what is left of the
caller's deadline, and for at most `ASK_BOUND_S` when the caller set none.
"""

from __future__ import annotations

from timerwheel.v1 import timerwheel_pb2 as pb

EXPORT = "/timerwheel.v1.TimerAdmin/Export"
ASK_BOUND_S = 3_600.0  # a node whose part took longer than this has not answered


def timeout_s(remaining: float | None) -> float:
    """How long each node is given: three quarters of the caller's time, at most the bound."""
    return ASK_BOUND_S if remaining is None else min(ASK_BOUND_S, remaining * 0.75)


def retry_hint(out_dir: str) -> str:
    """Appended to an Export that failed: what the nodes that answered left behind."""
    return (
        f" (the nodes that answered wrote their part into {out_dir!r} below their export "
        "roots: retry with another out_dir, and remove those parts)"
    )


def merge(answers: list[tuple[pb.ExportResponse, list[int], str, str]]) -> pb.ExportResponse:
    """One answer from every node's (answer, partitions, node, address), this node first:
    a row a node, the sums, the earliest cut and the longest node's seconds."""
    nodes = [
        pb.ExportNode(
            node=node, address=address, partitions=partitions, out_dir=answer.out_dir,
            rows=answer.rows, files=answer.files, timers=answer.timers, bytes=answer.bytes,
            cut_at_ms=answer.cut_at_ms, seconds=answer.seconds,
        )
        for answer, partitions, node, address in answers
    ]  # fmt: skip
    return pb.ExportResponse(
        out_dir=answers[0][0].out_dir,
        rows=sum(n.rows for n in nodes),
        files=sum(n.files for n in nodes),
        timers=sum(n.timers for n in nodes),
        bytes=sum(n.bytes for n in nodes),
        cut_at_ms=min(n.cut_at_ms for n in nodes),
        seconds=max(n.seconds for n in nodes),
        nodes=nodes,
    )
