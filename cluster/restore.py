"""A takeover's restore: the live timers of a partition's fold sent into the node's engine
as the fold holds them (docs/cluster.md, "What a node does now").

Built as the engine's own prepared sends (`timerwheel.engine.send_op.SendOp`), not
through `send_batch`: the log's sends were validated when they were first sent, a fired
occurrence's id `<series>#<n>` is no client's id (send validation refuses `#`), and a
series must come back with its `extras` as logged (the number, time and pause of its
next occurrence), which a new send would start again at occurrence 1.
"""

from __future__ import annotations

from timerwheel.cluster import journal
from timerwheel.engine.send_op import SendOp
from timerwheel.store import records


def restore_op(sents: list[journal.Sent], not_before_ms: int, now_ms: int) -> SendOp:
    """The sends that store `sents` again (`IfExists.RESTORE`), each at its time or at
    `not_before_ms` (a long-overdue one fires at once either way)."""
    specs = [sent.spec(not_before_ms) for sent in sents]
    times = [spec.when.value for spec in specs]
    op = SendOp(
        specs=specs, message_ids=[sent.message_id for sent in sents], deliver_times_ms=times,
        records=records.encode_new_many(specs, times, now_ms),
        topics=[sent.topic for sent in sents], client_ids=True,
    )  # fmt: skip
    if any(sent.options for sent in sents):
        op.extras = [sent.options or None for sent in sents]
        for index, sent in enumerate(sents):
            if sent.options:
                series = journal.is_series(sent)
                op.records[index] = records.with_extras_flag(op.records[index], series)
    return op
