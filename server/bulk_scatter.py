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

import grpc

from timerwheel.server.forwarding import Forwarding, is_forwarded
from timerwheel.server.scatter import (
    ASK_BOUND_S,
    PARTITIONS,
    ClusterView,
    ScatterGather,
    Unanswered,
    _check_cover,
    _encode,
)
from timerwheel.store import bulk as bulk_cf
from timerwheel.v1 import timerwheel_pb2 as pb

ADMIN = "/timerwheel.v1.TimerAdmin/"
BULK_CANCEL = ADMIN + "BulkCancel"
PURGE = ADMIN + "Purge"
REDRIVE = ADMIN + "Redrive"
RESPONSES = {BULK_CANCEL: pb.BulkResponse, PURGE: pb.BulkResponse, REDRIVE: pb.RedriveResponse}
SCAN_ORDER = {bulk_cf.BY_ID: 0, bulk_cf.BY_WHEEL: 1, bulk_cf.BY_READY: 2}  # as a call runs them


class BulkScatter(grpc.ServerInterceptor):
    def __init__(self, view: ClusterView, channels: Forwarding) -> None:
        self._view = view
        self._channels = channels
        self._one_node = ScatterGather(view, channels)  # its answer-here and peer-answer steps

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        method = details.method
        if handler is None or method not in RESPONSES or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary
        if is_forwarded(details.invocation_metadata):

            def answer_here(request, context):
                response, partitions = self._one_node._local(behaviour, request, context)
                context.set_trailing_metadata(((PARTITIONS, _encode(partitions)),))
                return response

            wrapped = answer_here
        else:
            metadata = Forwarding.passed_on(details.invocation_metadata)

            def gathered(request, context):
                try:
                    return self._gather(method, behaviour, request, context, metadata)
                except Unanswered as error:
                    context.abort(error.code, error.details)

            wrapped = gathered
        return grpc.unary_unary_rpc_method_handler(
            wrapped, request_deserializer=handler.request_deserializer,
            response_serializer=handler.response_serializer,
        )  # fmt: skip

    def _gather(self, method: str, behaviour, request, context, metadata) -> Any:
        cluster = self._view.cluster_map()
        me = cluster["holder"]
        peers = {
            row["address"]: row["owner"].split("/")[0] for row in cluster["map"]
            if row["owner"] and row["owner"] != me and row["address"]
            and row["address"] != cluster["address"]
        }  # fmt: skip
        remaining = context.time_remaining()
        timeout_s = ASK_BOUND_S if remaining is None else min(ASK_BOUND_S, remaining * 0.75)
        calls = []
        for address, owner in sorted(peers.items()):
            stub = self._channels.channel(address).unary_unary(
                method, response_deserializer=RESPONSES[method].FromString
            )
            call = stub.future(request.SerializeToString(), timeout=timeout_s, metadata=metadata)
            calls.append((call, address, owner))
        try:
            answers = [self._one_node._local(behaviour, request, context)]
            answers += [ScatterGather._answer(*call) for call in calls]
        finally:
            for call, _, _ in calls:
                call.cancel()  # those still under way when another failed
        _check_cover([parts for _, parts in answers], cluster["partitions"])
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
