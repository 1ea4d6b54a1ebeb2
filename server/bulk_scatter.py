"""BulkCancel, Purge and Redrive for the whole cluster (cluster mode, docs/cluster.md,
"Whole-cluster BulkCancel, Purge and Redrive").

Each node's engine holds only the partitions it owns, so a bulk call a node receives from
a client is asked at once of every other node that owns partitions (marked forwarded:
each applies it to its own engine only, and logs what it changed in each partition's log
before it answers: timerwheel.cluster.api), while this node applies it to its own; the
answers are summed. As for List and Count (timerwheel.server.scatter, whose helpers this
uses), every answer names its partitions, and the summed answer is given only when they
cover every partition exactly once; otherwise the call fails UNAVAILABLE naming the node
or the partitions.

Unlike a List, a failed bulk call may have changed something: the nodes that answered
applied it (and logged it). Every such change is idempotent in effect (a cancelled,
purged or redriven message no longer matches), so the caller retries the same request
(same page token): the retry changes what is left, and its counts are what it changed,
not what the failed call did.

`limit` bounds what each node changes, so one call changes at most `limit` a node. The
merged `next_page_token` is the earliest position at which a node stopped (the store's
cursors order by scan, then key: timerwheel.store.bulk), and every node continues from it
on the next call: a node that had gone further scans again what it already changed, which
no longer matches, so nothing is counted twice.
"""

from __future__ import annotations

from typing import Any

from timerwheel.server.scatter import ScatterGather, _ask_timeout_s, _peers
from timerwheel.store import bulk as bulk_cf
from timerwheel.v1 import timerwheel_pb2 as pb

ADMIN = "/timerwheel.v1.TimerAdmin/"
BULK_CANCEL = ADMIN + "BulkCancel"
PURGE = ADMIN + "Purge"
REDRIVE = ADMIN + "Redrive"
RESPONSES = {BULK_CANCEL: pb.BulkResponse, PURGE: pb.BulkResponse, REDRIVE: pb.RedriveResponse}
SCAN_ORDER = {bulk_cf.BY_ID: 0, bulk_cf.BY_WHEEL: 1, bulk_cf.BY_READY: 2}  # as a call runs them


class BulkScatter(ScatterGather):
    """ScatterGather's steps (answer here when forwarded, ask every node otherwise) for
    the bulk calls, whose answers are summed by `merge`."""

    responses = RESPONSES

    def _gather(self, method: str, behaviour, request, context, metadata) -> Any:
        cluster = self._view.cluster_map()
        timeout_s = _ask_timeout_s(context.time_remaining())
        answers = self._ask_every_node(
            method, behaviour, request, context, metadata, cluster, _peers(cluster), timeout_s
        )
        return merge(method, [answer for answer, _ in answers])


def merge(method: str, answers: list) -> Any:
    """The nodes' answers summed; the token: the earliest position a node stopped at."""
    tokens = [a.next_page_token for a in answers if a.next_page_token]
    token = min(tokens, key=_position) if tokens else ""
    more = bool(token) or any(a.more for a in answers)
    if method == REDRIVE:
        return pb.RedriveResponse(
            moved=sum(a.moved for a in answers), next_page_token=token, more=more
        )
    return pb.BulkResponse(
        cancelled=sum(a.cancelled for a in answers), purged=sum(a.purged for a in answers),
        next_page_token=token, more=more,
    )  # fmt: skip


def _position(token: str) -> tuple[int, bytes]:
    cursor = bulk_cf.decode_cursor(token)
    assert cursor is not None
    scan, key = cursor
    return SCAN_ORDER[scan], key
