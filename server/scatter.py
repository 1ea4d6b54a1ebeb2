"""List, Count and Topics (and Export: timerwheel.server.export_scatter) for the whole
cluster: scatter-gather (cluster mode, docs/cluster.md, "Any node answers").

Each node's engine holds only the partitions it owns. A List, Count or Topics a node
receives from a client is asked of every other node that owns partitions (marked
forwarded, so each answers from its own engine only) while this node answers for its
own, and the answers are merged: Count sums; Topics sums each topic's backlog over the
nodes and pages the merged list by name; List merges the nodes' pages by deliver time.

A List page token is a position, the wheel key (deliver time, id) of the last timer
returned, the same token a single node makes: every node is asked for the timers after
it, so a token stays good when partitions move between pages. A node's page that ended
early (its own limit, its byte bound or its scan budget) bounds the merged page at its
continuation key, below which the merged page is complete.

Every answer names the partitions it is for (trailing metadata `timerwheel-partitions`).
The merged answer is given only when the answers cover every partition exactly once: a
node that does not answer in time, a partition with no owner at the moment, or one being
restored or purged (its timers partly in an engine) makes the call fail UNAVAILABLE,
naming the node or the partitions, rather than answer a silently partial or doubled
figure; the caller retries. Nodes are asked at once, each for at most three quarters of
what is left of the caller's deadline (so the caller still hears which node did not
answer) and never more than `ASK_BOUND_S`.
"""

from __future__ import annotations

import bisect
from typing import Any, Protocol

import grpc

from timerwheel.security.scopes import call_scope, stored
from timerwheel.server import export_scatter
from timerwheel.server.admin_service import TOPICS_LIMIT_MAX, topics_limit
from timerwheel.server.fan_in import PeerLookup
from timerwheel.server.forwarding import SERVICE, Forwarding, is_forwarded
from timerwheel.store import keys
from timerwheel.v1 import timerwheel_pb2 as pb

LIST = SERVICE + "List"
COUNT = SERVICE + "Count"
TOPICS = "/timerwheel.v1.TimerAdmin/Topics"
EXPORT = export_scatter.EXPORT  # each node writes its own partitions: server.export_scatter
RESPONSES = {
    LIST: pb.ListResponse, COUNT: pb.CountResponse, TOPICS: pb.TopicsResponse,
    EXPORT: pb.ExportResponse,
}  # fmt: skip
PARTITIONS = "timerwheel-partitions"  # trailing metadata: the partitions an answer is for
ASK_BOUND_S = 10.0  # a node that has not answered in this long has not answered
LIST_DEFAULT_LIMIT = 100  # a List's limit 0 (engine.lookups)
# Codes that say a node could not answer (rather than that the request is wrong): the
# merged call fails UNAVAILABLE, naming the node.
NOT_ANSWERED = {
    grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED, grpc.StatusCode.CANCELLED,
    grpc.StatusCode.UNKNOWN, grpc.StatusCode.INTERNAL, grpc.StatusCode.RESOURCE_EXHAUSTED,
    grpc.StatusCode.ABORTED,
}  # fmt: skip


class ClusterView(PeerLookup, Protocol):
    def cluster_map(self) -> dict[str, Any]:
        """The node, its holder and address, the partition count, and each partition's
        owner and address as this node last read them (timerwheel.cluster.node)."""
        ...

    def settled_partitions(self) -> list[int] | None:
        """The partitions this node's engine holds, and only those; None while one moves."""
        ...


class Unanswered(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code = code
        self.details = details


class ScatterGather(grpc.ServerInterceptor):
    """Asks every node for the calls of `responses` and merges their answers in `_gather`
    (timerwheel.server.bulk_scatter reuses the steps for the bulk calls)."""

    responses: dict[str, Any] = RESPONSES  # the calls taken, and each one's answer type

    def __init__(self, view: ClusterView, channels: Forwarding) -> None:
        self._view = view
        self._channels = channels

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        method = details.method
        if handler is None or method not in self.responses or handler.unary_unary is None:
            return handler
        behaviour = handler.unary_unary
        if is_forwarded(details.invocation_metadata):

            def answer_here(request, context):
                response, partitions = self._local(behaviour, request, context)
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

    # -- one node's answer -------------------------------------------------------------
    def _local(self, behaviour, request, context) -> tuple[Any, list[int]]:
        """This node's answer and the partitions it is for; UNAVAILABLE while a partition
        moves to or from this node (its engine holds part of it)."""
        before = self._view.settled_partitions()
        response = behaviour(request, context) if before is not None else None
        if before is None or self._view.settled_partitions() != before:
            name = self._view.cluster_map()["node"]
            context.abort(
                grpc.StatusCode.UNAVAILABLE,
                f"node {name}: a partition is moving to or from it; retry",
            )  # fmt: skip
        return response, before or []

    def _ask(self, method: str, address: str, request, metadata, timeout_s):
        """The call to a peer, under way (gRPC's own future: no thread waits on it)."""
        call = self._channels.channel(address).unary_unary(
            method, response_deserializer=self.responses[method].FromString
        )
        return call.future(request.SerializeToString(), timeout=timeout_s, metadata=metadata)

    @staticmethod
    def _answer(call, address: str, owner: str) -> tuple[Any, list[int]]:
        """A peer's answer and the partitions it is for, once it has come."""
        try:
            response = call.result()
        except grpc.RpcError as error:
            code, text = error.code(), error.details() or ""
            if code in NOT_ANSWERED:
                raise Unanswered(
                    grpc.StatusCode.UNAVAILABLE,
                    f"node {owner} at {address} did not answer ({code.name}: {text}); "
                    "no partial answer is given: retry",
                ) from error
            raise Unanswered(code, f"node {owner} at {address}: {text}") from error
        trailing = dict(call.trailing_metadata() or ())
        return response, _decode(trailing.get(PARTITIONS, ""))

    # -- every node's answers, merged ---------------------------------------------------
    def _ask_every_node(
        self, method, behaviour, request, context, metadata, cluster, peers, timeout_s
    ) -> list[tuple[Any, list[int]]]:
        """[(answer, partitions)] of this node (first) and every peer (`peers`: address to
        owner), covering every partition once; Unanswered otherwise."""
        calls = [
            (self._ask(method, address, request, metadata, timeout_s), address, owner)
            for address, owner in sorted(peers.items())
        ]
        try:
            answers = [self._local(behaviour, request, context)]
            answers += [self._answer(*call) for call in calls]
        finally:
            for call, _, _ in calls:
                call.cancel()  # those still under way when another failed
        _check_cover([parts for _, parts in answers], cluster["partitions"])
        return answers

    def _gather(self, method, behaviour, request, context, metadata):
        cluster = self._view.cluster_map()
        peers = _peers(cluster)
        remaining = context.time_remaining()
        timeout_s = _ask_timeout_s(remaining)
        if method == EXPORT:
            timeout_s = export_scatter.timeout_s(remaining)

        def ask_all(one_request, named: bool = False):
            """[(answer, partitions)] of this node (first) and every peer; with `named`,
            [(answer, partitions, node, address)]."""
            answers = self._ask_every_node(
                method, behaviour, one_request, context, metadata, cluster, peers, timeout_s
            )
            if named:
                who = [(cluster["node"], cluster["address"])]
                who += [(owner, address) for address, owner in sorted(peers.items())]
                return [(a, parts, *node) for (a, parts), node in zip(answers, who, strict=True)]
            return [answer for answer, _ in answers]

        if method == COUNT:
            answers = ask_all(request)
            return pb.CountResponse(
                pending=sum(a.pending for a in answers), from_ms=answers[0].from_ms,
                to_ms=answers[0].to_ms,
            )  # fmt: skip
        if method == EXPORT:
            try:
                return export_scatter.merge(ask_all(request, named=True))
            except Unanswered as error:
                hint = export_scatter.retry_hint(request.out_dir)
                raise Unanswered(error.code, error.details + hint) from error
        if method == LIST:
            return _merge_list(ask_all(request), request.limit or LIST_DEFAULT_LIMIT)
        if not 0 <= request.limit <= TOPICS_LIMIT_MAX:
            return behaviour(request, context)  # refused there: INVALID_ARGUMENT
        return _merge_topics(ask_all, request)


def _peers(cluster: dict[str, Any]) -> dict[str, str]:
    """Address to owner of every other node that owns partitions, as this node read them."""
    me = cluster["holder"]
    return {
        row["address"]: row["owner"].split("/")[0] for row in cluster["map"]
        if row["owner"] and row["owner"] != me and row["address"]
        and row["address"] != cluster["address"]
    }  # fmt: skip


def _ask_timeout_s(remaining: float | None) -> float:
    """Three quarters of what is left to the caller, so it still hears which node failed."""
    return ASK_BOUND_S if remaining is None else min(ASK_BOUND_S, remaining * 0.75)


def _merge_list(pages: list[pb.ListResponse], limit: int) -> pb.ListResponse:
    """The first `limit` timers of the nodes' pages by (deliver time, id), below the
    lowest continuation key of a node whose page ended early."""
    bound = None
    for page in pages:
        if page.next_page_token:
            frontier = keys.decode_page_token(page.next_page_token)
            bound = frontier if bound is None else min(bound, frontier)
    # By stored id: a scoped token is shown its ids without its scope, and the nodes'
    # continuation keys are of stored ids (timerwheel.security.scopes: `stored` undoes
    # `view`).
    scope, _ = call_scope()
    keyed = sorted(
        (keys.wheel_key(m.deliver_at_ms, stored(scope, m.message_id) if scope else m.message_id), m)
        for page in pages for m in page.messages
    )  # fmt: skip
    if bound is not None:
        keyed = [(key, m) for key, m in keyed if key <= bound]
    taken = keyed[:limit]
    if len(taken) == limit:
        token = keys.encode_page_token(taken[-1][0])
    else:
        token = keys.encode_page_token(bound) if bound is not None else ""
    return pb.ListResponse(messages=[m for _, m in taken], next_page_token=token)


def _merge_topics(ask_all, request: pb.TopicsRequest) -> pb.TopicsResponse:
    """Every node's topics (each read whole, page by page), summed by name, then paged
    as a single node pages them."""
    per_node: list[dict[str, tuple[int, int]]] = []  # in ask_all's order: this node first
    token = ""
    while True:
        answers = ask_all(pb.TopicsRequest(limit=TOPICS_LIMIT_MAX, page_token=token))
        for index, answer in enumerate(answers):
            if index == len(per_node):
                per_node.append({})
            for row in answer.topics:  # a name seen again on a later round: one value a node
                per_node[index][row.topic] = (row.pending, row.fired_unacked)
        more = [a.next_page_token for a in answers if a.next_page_token]
        if not more:
            break
        token = min(more)  # every node again after the lowest last name of those with more
    merged: dict[str, list[int]] = {}
    for rows in per_node:
        for topic, (pending, unacked) in rows.items():
            sums = merged.setdefault(topic, [0, 0])
            sums[0] += pending
            sums[1] += unacked
    every = sorted(merged.items())
    limit = topics_limit(request.limit)
    start = bisect.bisect_right(every, request.page_token, key=lambda row: row[0])
    page = every[start : start + limit]
    return pb.TopicsResponse(
        topics=[pb.TopicBacklog(topic=t, pending=p, fired_unacked=u) for t, (p, u) in page],
        next_page_token=page[-1][0] if start + limit < len(every) else "",
        total=len(every),
    )  # fmt: skip


def _check_cover(answered: list[list[int]], partitions: int) -> None:
    """The answers are for every partition, each once; UNAVAILABLE otherwise."""
    seen: dict[int, int] = {}
    for parts in answered:
        for partition in parts:
            seen[partition] = seen.get(partition, 0) + 1
    twice = sorted(p for p, n in seen.items() if n > 1)
    missing = sorted(set(range(partitions)) - set(seen))
    if twice:
        raise Unanswered(
            grpc.StatusCode.UNAVAILABLE,
            f"partitions {twice} were answered for by two nodes (a move under way); retry",
        )  # fmt: skip
    if missing:
        raise Unanswered(
            grpc.StatusCode.UNAVAILABLE,
            f"partitions {missing} have no owner that answered (no owner at the moment, or "
            "one this node has not read yet); no partial answer is given: retry",
        )  # fmt: skip


def _encode(partitions: list[int]) -> str:
    return ",".join(map(str, partitions))


def _decode(text: str) -> list[int]:
    return [int(p) for p in text.split(",") if p]
