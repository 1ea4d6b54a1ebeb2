"""Client-side routing by partition for `timerwheel.AsyncClient` (grpc.aio): the same
decisions as `timerwheel.Client`'s (timerwheel/routing.py, docs/cluster.md "ClusterMap and
routing"), awaited.

`AsyncRouter` is the shared `RouteTable` (the map, each id's owner, when and where to
read the map, a stub per owner) with the map read by an awaited ClusterMap call and the
owners' channels grpc.aio ones. `call_routed` makes a call on an id at its owner, marked
`timerwheel-direct`, and on "not owner" or UNAVAILABLE reads the map again and calls once
more; `send_split` sends a SendBatch of several owners as one call per owner, all at once
(asyncio.gather), answered as `timerwheel.split_send` answers the blocking client's.
"""

from __future__ import annotations

import asyncio
import functools

import grpc

from timerwheel.common import SendResult
from timerwheel.connections import open_aio_channels
from timerwheel.credentials import Tls
from timerwheel.retries import RetrySchedule, call_retrying_async
from timerwheel.routing import DIRECT_METADATA, RouteTable, reroutable
from timerwheel.split_send import (
    owner_parts,
    reroutable_answer,
    split_results,
    to_send_again,
)
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc


class AsyncRouter(RouteTable):
    """The routing of `timerwheel.AsyncClient`: `RouteTable` with awaited calls. Use it
    in the event loop its client lives in."""

    async def owner_stub(self, message_id: str) -> pb_grpc.TimerServiceStub | None:
        """As `Router.owner_stub`: the owner's stub, or None (call the target)."""
        if self.wants_map(message_id) and not await self.refresh(force=False):
            return None
        return self.stub_at(self.address_of(message_id))

    async def refresh(self, force: bool = True) -> bool:
        """As `Router.refresh`: read the map again; False when no node answered."""
        sources = self.map_sources(force)
        if sources is None:
            return False
        for stub in sources:
            try:
                answer = await stub.ClusterMap(pb.ClusterMapRequest(), timeout=self.map_timeout_s)
            except grpc.RpcError as error:
                if self.refused(error):
                    return False
                continue
            return self.answered(answer)
        return self.unanswered()

    async def close(self) -> None:
        for channel in self._take_channels():
            await channel.close()


def open_owner_channel(
    address: str, *, tls: Tls | bool | None, token: str | None, options: list
) -> grpc.aio.Channel:
    """A grpc.aio channel to a cluster node the map names, with the client's credentials."""
    return open_aio_channels(address, tls, token, options, 1)[0]


async def call_routed(
    router: AsyncRouter, service, name: str, request, message_id: str,
    timeout_s: float | None, retry: bool, schedule: RetrySchedule,
):  # fmt: skip
    """The call `name` on `message_id`, as `Client._routed`: at the owner of its partition
    when known (marked direct); after a "not owner" or UNAVAILABLE answer the map is read
    again and the call made once more, at the owner the new map names or else at the
    target (`service`), which forwards it. `retry`: that second call rides through
    UNAVAILABLE with backoff (an idempotent request). Errors raise `RemoteError`."""
    try:
        stub = await router.owner_stub(message_id)
        if stub is not None:
            try:
                method = functools.partial(getattr(stub, name), metadata=DIRECT_METADATA)
                return await call_retrying_async(method, request, timeout_s, unavailable=False)
            except grpc.RpcError as error:
                if not reroutable(error):
                    raise
            await router.refresh()
            stub = await router.owner_stub(message_id)
        method = getattr(service, name)
        if stub is not None:
            method = functools.partial(getattr(stub, name), metadata=DIRECT_METADATA)
        return await call_retrying_async(method, request, timeout_s, schedule, unavailable=retry)
    except grpc.RpcError as error:
        raise RemoteError.of(error) from None


async def send_split(
    router: AsyncRouter, service, messages: list[pb.SendRequest], retry: bool,
    timeout_s: float | None, schedule: RetrySchedule,
) -> list[SendResult]:  # fmt: skip
    """A SendBatch as one call per owner, at once; parts answered "not owner" or
    UNAVAILABLE are sent again once after the map is read again (`retry`: then riding
    through UNAVAILABLE). All acknowledged: every result in message order; otherwise the
    first failing part's `RemoteError`, saying which messages were acknowledged."""
    everything = list(range(len(messages)))
    answers = await _send_parts(router, service, messages, everything, False, timeout_s, schedule)
    again = to_send_again(answers)
    if again:
        await router.refresh()
        answers = [(ix, a) for ix, a in answers if not reroutable_answer(a)]
        answers += await _send_parts(router, service, messages, again, retry, timeout_s, schedule)
    return split_results(messages, answers)


async def _send_parts(
    router: AsyncRouter, service, messages: list[pb.SendRequest], indices: list[int],
    retry: bool, timeout_s: float | None, schedule: RetrySchedule,
) -> list:  # fmt: skip
    """SendBatch calls for `indices`, one per owner, at once: [(indices, the answer or
    the RpcError)]."""

    async def part(address: str, part_indices: list[int]):
        request = pb.SendBatchRequest(messages=[messages[i] for i in part_indices])
        stub = router.stub_at(address)
        method = service.SendBatch if stub is None else stub.SendBatch
        method = functools.partial(method, metadata=() if stub is None else DIRECT_METADATA)
        try:  # a part refused without anything stored is sent again, as any send
            answer = await call_retrying_async(
                method, request, timeout_s, schedule, unavailable=retry
            )
            return part_indices, answer
        except grpc.RpcError as error:
            return part_indices, error

    groups = owner_parts(router, messages, indices)
    return list(await asyncio.gather(*(part(a, ix) for a, ix in groups.items())))
