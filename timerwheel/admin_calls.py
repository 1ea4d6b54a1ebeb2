"""`Client`'s TimerAdmin calls: stats, topics, export, the console's views, bulk calls.

A mixin, so `timerwheel.Client` keeps one flat API while its module holds the data-plane
calls and the routing. Each method builds its request and makes it through the client's
`_unary` (its deadline, its retries, `RemoteError` on failure); admin calls are made on
the client's first connection (`Client.admin`) and are never routed by partition: in a
cluster the node asked answers for the whole cluster or says which node it could not
reach (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timerwheel.types import timer_filter
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc


class AdminCalls:
    """The TimerAdmin half of `timerwheel.Client` (timerwheel/client.py)."""

    admin: pb_grpc.TimerAdminStub
    _unary: Callable[..., Any]

    def export(self, out_dir: str, max_rows_per_file: int = 0) -> pb.ExportResponse:
        request = pb.ExportRequest(out_dir=out_dir, max_rows_per_file=max_rows_per_file)
        return self._unary(self.admin.Export, request, timeout_s=None)  # may take minutes

    def stats(self) -> pb.StatsResponse:
        """The server's figures; `.fire_lateness` is per minute of the last hour."""
        return self._unary(self.admin.Stats, pb.StatsRequest())

    def topics(self, after: str = "") -> list[pb.TopicBacklog]:
        """Every topic with a backlog (named after `after`, by name): its pending and
        fired-not-acked counts, read page by page (`topics_page`)."""
        topics: list[pb.TopicBacklog] = []
        token = after
        while True:
            page = self.topics_page(page_token=token)
            topics.extend(page.topics)
            token = page.next_page_token
            if not token:
                return topics

    def topics_page(self, limit: int = 0, page_token: str = "") -> pb.TopicsResponse:
        """One page of topics with a backlog, by name, after `page_token` (a previous
        page's `next_page_token`, or any name); `limit` 0: the server's default."""
        request = pb.TopicsRequest(limit=limit, page_token=page_token)
        return self._unary(self.admin.Topics, request)

    def in_flight(self, topic: str, limit: int = 0) -> pb.InFlightResponse:
        """The fired, un-acked messages the delivery hub holds for `topic`, with their
        attempt and consumer. Admin only."""
        return self._unary(self.admin.InFlight, pb.InFlightRequest(topic=topic, limit=limit))

    def consumers(self, topic: str = "") -> pb.ConsumersResponse:
        """The Subscribe streams of `topic` (empty: all) and each topic's lag. Admin only."""
        return self._unary(self.admin.Consumers, pb.ConsumersRequest(topic=topic))

    # -- bulk: cancel, purge, redrive (docs/features.md) ---------------------------------
    timer_filter = staticmethod(timer_filter)  # what a bulk call selects (AND)

    def bulk_cancel(
        self, timer_filter: pb.TimerFilter, limit: int = 0, page_token: str = ""
    ) -> pb.BulkResponse:
        """Cancel the SCHEDULED timers the filter selects, at most `limit` (0: 1000) this
        call; call again with `next_page_token` while `more`. Not retried."""
        request = pb.BulkRequest(filter=timer_filter, limit=limit, page_token=page_token)
        return self._unary(self.admin.BulkCancel, request)

    def purge(
        self, timer_filter: pb.TimerFilter, limit: int = 0, page_token: str = ""
    ) -> pb.BulkResponse:
        """`bulk_cancel`, and the FIRED, un-acked messages it selects too (dead letters
        among them): never delivered again. Admin only. Not retried."""
        request = pb.BulkRequest(filter=timer_filter, limit=limit, page_token=page_token)
        return self._unary(self.admin.Purge, request)

    def redrive(
        self, dead_letter_topic: str, timer_filter: pb.TimerFilter | None = None,
        limit: int = 0, page_token: str = "",
    ) -> pb.RedriveResponse:  # fmt: skip
        """Move dead letters of `dead_letter_topic` (all, or those the filter selects; its
        topic: the one they came from) back to their topics. Admin only. Not retried."""
        request = pb.RedriveRequest(
            dead_letter_topic=dead_letter_topic, filter=timer_filter or pb.TimerFilter(),
            limit=limit, page_token=page_token,
        )  # fmt: skip
        return self._unary(self.admin.Redrive, request)
