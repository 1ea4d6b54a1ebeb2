"""`AsyncClient`'s TimerAdmin calls: stats, topics, export, bulk calls.

A mixin, as `timerwheel.admin_calls.AdminCalls` is for `timerwheel.Client`, so
`timerwheel.AsyncClient` keeps one flat API while timerwheel/aio.py holds the data-plane
calls and the routing. Each method builds its request and awaits it through the client's
`_unary` (its deadline, its retries, `RemoteError` on failure); admin calls are made on
the client's first connection (`AsyncClient.admin`) and are never routed by partition:
in a cluster the node asked answers for the whole cluster (docs/cluster.md).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from timerwheel.types import timer_filter
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc


class AsyncAdminCalls:
    """The TimerAdmin half of `timerwheel.AsyncClient` (timerwheel/aio.py)."""

    admin: pb_grpc.TimerAdminStub
    _unary: Callable[..., Any]

    async def export(self, out_dir: str, max_rows_per_file: int = 0) -> pb.ExportResponse:
        request = pb.ExportRequest(out_dir=out_dir, max_rows_per_file=max_rows_per_file)
        return await self._unary(self.admin.Export, request, timeout_s=None)

    async def stats(self) -> pb.StatsResponse:
        return await self._unary(self.admin.Stats, pb.StatsRequest())

    async def topics(self, after: str = "") -> list[pb.TopicBacklog]:
        """As `Client.topics`: every page."""
        topics: list[pb.TopicBacklog] = []
        token = after
        while True:
            page = await self.topics_page(page_token=token)
            topics.extend(page.topics)
            token = page.next_page_token
            if not token:
                return topics

    async def topics_page(self, limit: int = 0, page_token: str = "") -> pb.TopicsResponse:
        request = pb.TopicsRequest(limit=limit, page_token=page_token)
        return await self._unary(self.admin.Topics, request)

    timer_filter = staticmethod(timer_filter)  # what a bulk call selects (AND)

    async def bulk_cancel(
        self, timer_filter: pb.TimerFilter, limit: int = 0, page_token: str = ""
    ) -> pb.BulkResponse:
        """As `Client.bulk_cancel`."""
        request = pb.BulkRequest(filter=timer_filter, limit=limit, page_token=page_token)
        return await self._unary(self.admin.BulkCancel, request)

    async def purge(
        self, timer_filter: pb.TimerFilter, limit: int = 0, page_token: str = ""
    ) -> pb.BulkResponse:
        """As `Client.purge`."""
        request = pb.BulkRequest(filter=timer_filter, limit=limit, page_token=page_token)
        return await self._unary(self.admin.Purge, request)

    async def redrive(
        self, dead_letter_topic: str, timer_filter: pb.TimerFilter | None = None,
        limit: int = 0, page_token: str = "",
    ) -> pb.RedriveResponse:  # fmt: skip
        """As `Client.redrive`."""
        request = pb.RedriveRequest(
            dead_letter_topic=dead_letter_topic, filter=timer_filter or pb.TimerFilter(),
            limit=limit, page_token=page_token,
        )  # fmt: skip
        return await self._unary(self.admin.Redrive, request)
