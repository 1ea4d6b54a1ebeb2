"""What a group commit's operations did, for the metrics (`Recorder.committed`): counted
from the ops and the outcomes the writer completes them with, after the commit, only
when metrics are on."""

from __future__ import annotations

from timerwheel.engine.bulk_ops import BulkCancelOp
from timerwheel.engine.ops import AckOp, CancelOp, Op
from timerwheel.engine.send_op import SendOp
from timerwheel.observability import metrics


def commit_counts(ops: list[Op], outcomes: list) -> metrics.CommitCounts:
    """What a commit's operations did, for its metrics: messages stored, acked and
    cancelled, and the commit's weight. `outcomes` as the writer completes them."""
    sends = acks = cancels = weight = 0
    for op, (ok, value) in zip(ops, outcomes, strict=True):
        weight += op.weight
        if not ok:
            continue
        if isinstance(op, SendOp):
            sends += sum(not r.existed for r in value) if op.client_ids else len(value)
        elif isinstance(op, AckOp):
            acks += len(value)
        elif isinstance(op, CancelOp):
            cancels += 1
        elif isinstance(op, BulkCancelOp):  # (cancelled, {topic: purged ids})
            cancels += value[0] + sum(map(len, value[1].values()))
    return metrics.CommitCounts(sends, acks, cancels, weight)
