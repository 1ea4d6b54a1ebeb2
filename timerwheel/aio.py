"""The asyncio client of the timerwheel gRPC API: `timerwheel.AsyncClient` (grpc.aio).

    async with timerwheel.AsyncClient("127.0.0.1:7070") as client:
        sent = await client.send("orders", b"hello", delay_ms="90s")
        (await client.get(sent.message_id)).state              # State.SCHEDULED
        async with client.producer() as producer:              # batching, for many tasks
            result = await producer.send("orders", b"one", delay_ms="2s")
        async with client.subscribe("orders") as stream:       # raw stream of batches
            async for batch in stream:                         # list[Delivery]
                await client.ack("orders", [d.message_id for d in batch])
        await client.consume("orders", handle, concurrency=8, stop=stop_event)

The same calls, arguments and answers as `timerwheel.Client`, awaited; errors raise the
same `RemoteError`. Create it inside the running event loop that will use it. Against a
cluster (`serve --cluster`) it routes as `timerwheel.Client` does: calls on an id go
straight to the node that owns the id's partition, by the cluster's map, and a SendBatch
of several owners goes as one call per owner, at once (timerwheel/aio_routing.py;
`routing=False` sends everything to `target`, which forwards).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Callable, Iterable, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from timerwheel.acks import DEFAULT_ACK_LINGER_MS
from timerwheel.aio_admin_calls import AsyncAdminCalls
from timerwheel.aio_consume import consume_async
from timerwheel.aio_producer import AsyncProducer
from timerwheel.aio_routing import AsyncRouter, call_routed, open_owner_channel, send_split
from timerwheel.common import SendResult, State
from timerwheel.connections import (
    Place,
    one_stub,
    open_aio_channels,
    place_in,
    redial_aio_channel,
    redials,
)
from timerwheel.consumer import Message
from timerwheel.credentials import Tls
from timerwheel.durations import duration_ms
from timerwheel.retries import (
    DEFAULT_SCHEDULE,
    RetrySchedule,
    call_retrying_async,
    reschedule_is_idempotent,
    sends_are_idempotent,
    with_schedule,
)
from timerwheel.types import (
    CHANNEL_OPTIONS,
    DEFAULT_TARGET,
    RemoteError,
    TimerInfo,
    send_request,
    send_result,
    with_default_port,
)
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

_CLIENT_TIMEOUT = object()


class AsyncSubscription:
    """A live Subscribe stream: `async for batch in it` (a list of `Delivery` per item);
    `cancel()` ends it (the server redelivers whatever was not acked)."""

    def __init__(self, call: grpc.aio.UnaryStreamCall) -> None:
        self._call = call

    async def __aiter__(self) -> AsyncIterator[list[pb.Delivery]]:
        try:
            async for batch in self._call:
                yield list(batch.deliveries)
        except asyncio.CancelledError:
            if not self._call.cancelled():
                raise  # our task was cancelled, not the stream
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                raise RemoteError.of(error) from None

    def cancel(self) -> None:
        self._call.cancel()

    async def __aenter__(self) -> AsyncSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()


class AsyncClient(AsyncAdminCalls):
    """`timerwheel.Client` for asyncio: every call is a coroutine, routed against a
    cluster as `Client`'s are (see the module doc)."""

    request = staticmethod(send_request)

    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout_s: float | None = 30.0,
        tls: Tls | bool | None = None,
        token: str | None = None,
        connections: int = 1,
        routing: bool = True,
        restart_budget_s: float | None = None,
    ) -> None:
        """Arguments as `timerwheel.Client` (tls=, token= for a secured server;
        connections= for one spread over a server's workers; routing=False to send
        every call to `target` even against a cluster; restart_budget_s= for servers
        slower to come back). The cluster's map is read at the first call on an id
        (a single node: one ClusterMap call, then nothing is routed)."""
        self.target = with_default_port(target)
        self.timeout_s = timeout_s
        self.retry = DEFAULT_SCHEDULE if restart_budget_s is None else RetrySchedule(
            restart_budget_s
        )  # fmt: skip
        options = with_schedule(CHANNEL_OPTIONS, self.retry)
        self._use(open_aio_channels(self.target, tls, token, options, connections))
        self._redial = functools.partial(redial_aio_channel, self.target, tls, token, options)
        self.router: AsyncRouter | None = None
        if routing:
            owner_channel = functools.partial(
                open_owner_channel, tls=tls, token=token, options=options
            )
            self.router = AsyncRouter(lambda: self.service, owner_channel, timeout_s)
        self.connection_workers: list[Place | None] = []  # as Client's

    def _use(self, channels: list[grpc.aio.Channel]) -> None:
        self.channels = channels
        self.channel = channels[0]  # admin and health calls go here
        self.service = one_stub(tuple(map(pb_grpc.TimerServiceStub, channels)))
        self.admin = pb_grpc.TimerAdminStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    # -- the TimerService calls -------------------------------------------------------------
    async def send(
        self, topic: str, body: bytes | str = b"", **when_and_more: object
    ) -> SendResult:
        """As `Client.send` (retried on UNAVAILABLE when it has a message_id; any send
        after a refusal that stored nothing, until `timeout_s` runs out)."""
        request = send_request(topic, body, **when_and_more)
        retry = sends_are_idempotent([request])
        return send_result(await self._routed("Send", request, request.message_id, retry))

    async def send_batch(self, requests: Sequence[pb.SendRequest]) -> list[SendResult]:
        """As `Client.send_batch`: one RPC, stored atomically (all or none); against a
        cluster, a batch of several owners goes as one call per owner, at once (each
        part atomic; all acknowledged, or the first failing part's error saying which
        messages were acknowledged)."""
        request = pb.SendBatchRequest(messages=requests)
        retry = sends_are_idempotent(request.messages)
        router = self.router
        first_id = next((m.message_id for m in request.messages if m.message_id), "")
        if router is None or await router.owner_stub(first_id) is None:
            response = await self._unary(self.service.SendBatch, request, retry=retry)
            return [send_result(r) for r in response.results]
        messages = list(request.messages)
        return await send_split(router, self.service, messages, retry, self.timeout_s, self.retry)

    def producer(
        self, *, linger_ms: int = 2, max_batch: int = 500, max_in_flight: int = 4
    ) -> AsyncProducer:
        """A batching producer for tasks: `await producer.send(...)` (timerwheel/producer.py)."""
        return AsyncProducer(
            self, linger_ms=linger_ms, max_batch=max_batch, max_in_flight=max_in_flight
        )

    async def cancel(self, message_id: str) -> State:
        response = await self._routed("Cancel", pb.CancelRequest(message_id=message_id), message_id)
        return State(response.state)

    async def get(
        self, message_id: str, include_body: bool = True, include_trace: bool = False
    ) -> TimerInfo:
        """As `Client.get`: with `include_trace`, `.trace` lists the timer's life."""
        request = pb.GetRequest(
            message_id=message_id, include_body=include_body, include_trace=include_trace
        )
        return TimerInfo(await self._routed("Get", request, message_id))

    async def list(
        self, topic: str, from_ms: int = 0, to_ms: int = 0, limit: int = 0, page_token: str = ""
    ) -> tuple[list[TimerInfo], str]:
        """One page of pending timers due in [from_ms, to_ms) (to_ms=0: no upper bound)."""
        request = pb.ListRequest(
            topic=topic, from_ms=from_ms, to_ms=to_ms, limit=limit, page_token=page_token
        )
        response = await self._unary(self.service.List, request)
        return [TimerInfo(m) for m in response.messages], response.next_page_token

    async def list_all(
        self, topic: str, from_ms: int = 0, to_ms: int = 0, limit: int = 0
    ) -> AsyncIterator[TimerInfo]:
        """Every page, following next_page_token."""
        token = ""
        while True:
            page, token = await self.list(topic, from_ms, to_ms, limit, token)
            for message in page:
                yield message
            if not token:
                return

    def subscribe(
        self, topic: str, max_in_flight: int = 0, consumer: str = ""
    ) -> AsyncSubscription:
        """Open a stream of fired messages (no deadline); `async for` it for batches.
        `consumer` names this subscriber in message traces (default: its address)."""
        request = pb.SubscribeRequest(topic=topic, max_in_flight=max_in_flight, consumer=consumer)
        return AsyncSubscription(self.service.Subscribe(request))

    async def ack(self, topic: str, message_ids: Iterable[str]) -> int:
        request = pb.AckRequest(topic=topic, message_ids=list(message_ids))
        return (await self._unary(self.service.Ack, request)).acked

    async def reschedule(self, message_id: str, **when: int | str) -> int:
        """As `Client.reschedule`: the timer's new deliver time."""
        if "delay_ms" in when:
            when["delay_ms"] = duration_ms(when["delay_ms"], "delay_ms")
        request = pb.RescheduleRequest(message_id=message_id, **when)
        retry = reschedule_is_idempotent(request)
        return (await self._routed("Reschedule", request, message_id, retry)).deliver_at_ms

    async def pause_series(self, series_id: str) -> pb.PauseSeriesResponse:
        """As `Client.pause_series`."""
        request = pb.PauseSeriesRequest(series_id=series_id)
        return await self._routed("PauseSeries", request, series_id)

    async def resume_series(self, series_id: str) -> pb.ResumeSeriesResponse:
        """As `Client.resume_series`."""
        request = pb.ResumeSeriesRequest(series_id=series_id)
        return await self._routed("ResumeSeries", request, series_id)

    async def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> pb.CountResponse:
        request = pb.CountRequest(topic=topic, from_ms=from_ms, to_ms=to_ms)
        return await self._unary(self.service.Count, request)

    async def nack(
        self,
        topic: str,
        message_ids: Iterable[str],
        reason: str = "",
        redeliver_after_ms: int | str = 0,
        *,
        release: bool = False,
    ) -> pb.NackResponse:
        """As `Client.nack`: failed attempts, delivered again (or dead-lettered);
        `release=True`: given back unstarted, no attempt counted (see `Client.nack`)."""
        request = pb.NackRequest(
            topic=topic, message_ids=list(message_ids), reason=reason,
            redeliver_after_ms=duration_ms(redeliver_after_ms, "redeliver_after_ms"),
            release=release,
        )  # fmt: skip
        return await self._unary(self.service.Nack, request)

    async def consume(
        self,
        topic: str,
        handler: Callable[[Message], object],
        *,
        concurrency: int = 1,
        max_in_flight: int = 0,
        stop: asyncio.Event | None = None,
        ack_linger_ms: int = DEFAULT_ACK_LINGER_MS,
    ) -> int:
        """As `Client.consume`, with `concurrency` tasks; an async handler is awaited."""
        return await consume_async(
            self, topic, handler, concurrency=concurrency, max_in_flight=max_in_flight,
            stop=stop, ack_linger_ms=ack_linger_ms,
        )  # fmt: skip

    # -- health (the TimerAdmin calls: AsyncAdminCalls) ----------------------------------
    async def health_status(self, service: str = "") -> str:
        request = health_pb2.HealthCheckRequest(service=service)
        response = await self._unary(self.health.Check, request)
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    async def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Wait until every connection is up (raises TimeoutError otherwise), then spread
        several connections over a server's workers, as `Client.wait_ready`."""
        await asyncio.wait_for(self._ready_and_spread(), timeout_s)

    async def _ready_and_spread(self) -> None:
        await asyncio.gather(*(channel.channel_ready() for channel in self.channels))
        if len(self.channels) == 1:
            return
        channels = list(self.channels)
        places = [await _place_of(channel) for channel in channels]
        for index in redials(places):
            channel = self._redial()
            try:
                await channel.channel_ready()
                place = await _place_of(channel)
            except BaseException:
                await channel.close()
                raise
            await channels[index].close()
            channels[index], places[index] = channel, place
        self._use(channels)
        self.connection_workers = places

    async def close(self) -> None:
        if self.router is not None:
            await self.router.close()
        for channel in self.channels:
            await channel.close()

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _routed(self, name: str, request, message_id: str, retry: bool = False):
        """The call `name` on `message_id`, at its owner when routing (as `Client._routed`)."""
        if self.router is None:
            return await self._unary(getattr(self.service, name), request, retry=retry)
        return await call_routed(
            self.router, self.service, name, request, message_id, self.timeout_s, retry,
            self.retry,
        )  # fmt: skip

    async def _unary(
        self, method, request, timeout_s: object = _CLIENT_TIMEOUT, retry: bool = False
    ):
        """As `Client._unary`."""
        timeout = self.timeout_s if timeout_s is _CLIENT_TIMEOUT else timeout_s
        try:
            return await call_retrying_async(
                method, request, timeout, self.retry, unavailable=retry
            )  # type: ignore[arg-type]
        except grpc.RpcError as error:
            raise RemoteError.of(error) from None


async def _place_of(channel: grpc.aio.Channel) -> Place | None:
    """The worker that answers on `channel`'s connection, as its health answer says
    (bounded by `wait_ready`'s timeout)."""
    call = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest())
    try:
        await call
        return place_in(await call.trailing_metadata())
    except grpc.RpcError:
        return None  # no health service: leave the spread as it is
