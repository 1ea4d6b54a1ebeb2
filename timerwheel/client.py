"""The synchronous client of the timerwheel gRPC API: `timerwheel.Client`.

    with timerwheel.Client("127.0.0.1:7070") as client:
        sent = client.send("orders", b"hello", delay_ms="90s")   # or 90_000, or a timedelta
        client.get(sent.message_id).state                      # State.SCHEDULED (a name)
        with client.producer() as producer:                    # batching, thread-safe
            producer.send("orders", b"one", delay_ms="2s").result()
        client.consume("orders", handle, concurrency=4, stop=stop_event)

Failures raise `RemoteError` (a `TimerwheelError`) carrying the gRPC status code and the
server's message. For throughput, let `producer()` batch single sends, or build requests
with `Client.request(...)` and call `send_batch` / `send_batch_future` (one RPC, one group
commit per batch). `subscribe` is the raw stream (a list of `Delivery` per item, acked
with `ack`); `consume` is the loop most consumers want. The raw stubs are
`client.service`, `client.admin` and `client.health` for anything else. The asyncio
twin is `timerwheel.AsyncClient` (timerwheel/aio.py).

A secured server (docs/security.md): `Client(target, tls=Tls(ca_file=...), token=...)`;
see `timerwheel.credentials`. A server with `--workers N` serves each TCP connection in
one worker: `Client(target, connections=N)` spreads one client's calls over N
connections (timerwheel/connections.py). Against a cluster (`serve --cluster`), calls on
an id go straight to the node that owns the id's partition, by the cluster's map
(timerwheel/routing.py; `routing=False` sends everything to `target`).
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from timerwheel.acks import DEFAULT_ACK_LINGER_MS
from timerwheel.admin_calls import AdminCalls
from timerwheel.common import SendResult, State
from timerwheel.connections import (
    Place,
    channel_ready,
    one_stub,
    open_channels,
    redial_channel,
    spread,
)
from timerwheel.consumer import Message, consume
from timerwheel.credentials import Tls
from timerwheel.durations import duration_ms
from timerwheel.producer import Producer
from timerwheel.retries import (
    DEFAULT_SCHEDULE,
    RetrySchedule,
    call_retrying,
    reschedule_is_idempotent,
    sends_are_idempotent,
    with_schedule,
)
from timerwheel.routing import (
    DIRECT_METADATA,
    Router,
    reroutable,
)
from timerwheel.split_send import send_split
from timerwheel.types import (
    CHANNEL_OPTIONS,
    DEFAULT_TARGET,
    RemoteError,
    Subscription,
    TimerInfo,
    send_request,
    send_result,
    with_default_port,
)
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

__all__ = ["DEFAULT_TARGET", "Client", "RemoteError", "Subscription", "TimerClient"]

_CLIENT_TIMEOUT = object()  # _unary default: the client's timeout_s


class Client(AdminCalls):
    """A connection to one timerwheel server and every call of its API, thread-safe.

    `target` is HOST:PORT (a bare host gets the service's port 7070, not gRPC's 443);
    `timeout_s` bounds each unary call (None: no deadline); `tls`: a `Tls` (or True: the
    system's trusted roots); `token`: the bearer token. Times are integer epoch or
    relative milliseconds, and wherever a call takes a delay it also takes a duration
    string ("250ms", "2s", "5m", "3d") or a `timedelta`. `connections`: how many TCP
    connections the calls take turns on (for a server with `--workers`; each connection
    is served by one worker). `routing`: against a cluster, send each call on an id to
    the node that owns it (timerwheel/routing.py); a single node is not affected.
    `restart_budget_s`: how long the idempotent calls ride through a server that is
    away, retrying (about 3 s by default; timerwheel/retries.py). Use it as a context
    manager, or call `close()`.
    """

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
        self.target = with_default_port(target)
        self.timeout_s = timeout_s
        self.retry = DEFAULT_SCHEDULE if restart_budget_s is None else RetrySchedule(
            restart_budget_s
        )  # fmt: skip
        options = with_schedule(CHANNEL_OPTIONS, self.retry)
        self._use(open_channels(self.target, tls, token, options, connections))
        self._redial = functools.partial(redial_channel, self.target, tls, token, options)
        # Against a cluster: the map of partition owners, read at the first call on an id.
        self.router: Router | None = None
        if routing:
            owner_channel = functools.partial(_owner_channel, tls=tls, token=token, options=options)
            self.router = Router(lambda: self.service, owner_channel, timeout_s)
        # The worker each connection reached, (index, count), as `wait_ready` left them
        # (None where the server did not say); empty before it, or with one connection.
        self.connection_workers: list[Place | None] = []

    def _use(self, channels: list[grpc.Channel]) -> None:
        self.channels = channels
        self.channel = channels[0]  # admin and health calls go here
        # One TimerService stub per connection; `service` takes turns on them.
        self.service = one_stub(tuple(map(pb_grpc.TimerServiceStub, channels)))
        self.admin = pb_grpc.TimerAdminStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    # -- building requests ------------------------------------------------------------------
    request = staticmethod(send_request)  # Client.request(topic, body, delay_ms="2s", ...)

    # -- the TimerService calls -------------------------------------------------------------
    def send(self, topic: str, body: bytes | str = b"", **when_and_more: object) -> SendResult:
        """`send(topic, body, delay_ms="90s" | deliver_at_ms=... | delay_level=...,
        properties=..., message_id=...)`. With a message_id that is already stored the
        result says so: `existed` is True and `existing_state` is that timer's state.
        With a message_id (and not IF_EXISTS_REPLACE) it is retried on UNAVAILABLE, so a
        server restart does not fail it; without one it is not. Any send refused by a
        server whose fires run late (RESOURCE_EXHAUSTED, nothing stored) is sent again
        after the wait it asks for, until `timeout_s` runs out (timerwheel/retries.py)."""
        request = self.request(topic, body, **when_and_more)
        retry = sends_are_idempotent([request])
        return send_result(self._routed("Send", request, request.message_id, retry=retry))

    def send_batch(self, requests: Sequence[pb.SendRequest]) -> list[SendResult]:
        """Many sends in one RPC; the server stores them atomically (all or none). Retried
        on UNAVAILABLE when every message has a message_id, and after a refusal that
        stored nothing, as `send`.

        Against a cluster, a batch whose ids belong to several owners is sent as one call
        per owner, at once: each part is atomic, the batch is not. It returns when every
        part is acknowledged; otherwise it raises the first failing part's error (in
        message order), saying which messages were acknowledged (docs/cluster.md)."""
        request = pb.SendBatchRequest(messages=requests)
        retry = sends_are_idempotent(request.messages)
        router = self.router
        first_id = next((m.message_id for m in request.messages if m.message_id), "")
        if router is None or router.owner_stub(first_id) is None:
            response = self._unary(self.service.SendBatch, request, retry=retry)
            return [send_result(r) for r in response.results]
        messages = list(request.messages)
        return send_split(router, self.service, messages, retry, self.timeout_s, self.retry)

    def producer(
        self, *, linger_ms: int = 2, max_batch: int = 500, max_in_flight: int = 4
    ) -> Producer:
        """A batching producer: `send()` one message from any thread, get a future; sends
        made close together go out as one SendBatch (timerwheel/producer.py)."""
        return Producer(self, linger_ms=linger_ms, max_batch=max_batch, max_in_flight=max_in_flight)

    def send_batch_future(self, requests: Sequence[pb.SendRequest]) -> grpc.Future:
        """Non-blocking SendBatch: `.result()` is a SendBatchResponse (or raises RpcError).
        Raw: nothing is retried (`producer()` is the batching way that is)."""
        return self.service.SendBatch.future(
            pb.SendBatchRequest(messages=requests), timeout=self.timeout_s
        )

    def cancel(self, message_id: str) -> State:
        response = self._routed("Cancel", pb.CancelRequest(message_id=message_id), message_id)
        return State(response.state)

    def get(
        self, message_id: str, include_body: bool = True, include_trace: bool = False
    ) -> TimerInfo:
        """The timer in any state; `.state` is a `State` (`.state.name == "FIRED"`). With
        `include_trace`, `.trace` lists its life as `TraceEvent`s (sent, cascades, fired,
        each delivery attempt, acked or cancelled) and `.attempts` counts deliveries."""
        request = pb.GetRequest(
            message_id=message_id, include_body=include_body, include_trace=include_trace
        )
        return TimerInfo(self._routed("Get", request, message_id))

    def list(
        self, topic: str, from_ms: int = 0, to_ms: int = 0, limit: int = 0, page_token: str = "",
        include_body: bool = False, *, id_prefix: str = "",
        properties: dict[str, str] | None = None,
    ) -> tuple[list[TimerInfo], str]:  # fmt: skip
        """One page of pending timers due in [from_ms, to_ms) (to_ms=0: no upper bound).
        A page may hold fewer than `limit` (the server's byte budget per page; a search by
        `id_prefix` or `properties` scans a bounded number of timers a call): follow the
        token."""
        request = pb.ListRequest(
            topic=topic, from_ms=from_ms, to_ms=to_ms, limit=limit, page_token=page_token,
            include_body=include_body, id_prefix=id_prefix, properties=properties or {},
        )  # fmt: skip
        response = self._unary(self.service.List, request)
        return [TimerInfo(m) for m in response.messages], response.next_page_token

    def list_all(
        self, topic: str, from_ms: int = 0, to_ms: int = 0, limit: int = 0,
        include_body: bool = False,
    ) -> Iterator[TimerInfo]:  # fmt: skip
        """Every page, following next_page_token."""
        token = ""
        while True:
            page, token = self.list(topic, from_ms, to_ms, limit, token, include_body)
            yield from page
            if not token:
                return

    def subscribe(self, topic: str, max_in_flight: int = 0, consumer: str = "") -> Subscription:
        """Open a stream of fired messages (no deadline); iterate it for batches.
        `consumer` names this subscriber in message traces (default: its address)."""
        request = pb.SubscribeRequest(topic=topic, max_in_flight=max_in_flight, consumer=consumer)
        return Subscription(self.service.Subscribe(request))

    def ack(self, topic: str, message_ids: Iterable[str]) -> int:
        request = pb.AckRequest(topic=topic, message_ids=list(message_ids))
        return self._unary(self.service.Ack, request).acked

    def reschedule(self, message_id: str, **when: int | str) -> int:
        """Move a SCHEDULED timer: one of deliver_at_ms=, delay_ms= (ms or "2s"),
        delay_level=. Returns its new deliver time. Retried on UNAVAILABLE only to an
        absolute deliver_at_ms (a delay would be counted again from the retry)."""
        if "delay_ms" in when:
            when["delay_ms"] = duration_ms(when["delay_ms"], "delay_ms")
        request = pb.RescheduleRequest(message_id=message_id, **when)
        retry = reschedule_is_idempotent(request)
        return self._routed("Reschedule", request, message_id, retry=retry).deliver_at_ms

    def pause_series(self, series_id: str) -> pb.PauseSeriesResponse:
        """Pause a recurring series without deleting it: its occurrences are skipped until
        `resume_series` (none caught up then). `.changed` is False when it was paused
        already; `.deliver_at_ms` is when its next occurrence would be."""
        request = pb.PauseSeriesRequest(series_id=series_id)
        return self._routed("PauseSeries", request, series_id)

    def resume_series(self, series_id: str) -> pb.ResumeSeriesResponse:
        """Resume a paused series at its next time (`.deliver_at_ms`); `.changed` is False
        when it was not paused."""
        request = pb.ResumeSeriesRequest(series_id=series_id)
        return self._routed("ResumeSeries", request, series_id)

    def count(self, topic: str, from_ms: int = 0, to_ms: int = 0) -> pb.CountResponse:
        """Pending timers of `topic`: the exact total, or those due in [from_ms, to_ms)
        counted in whole minutes (the response says which range was counted)."""
        request = pb.CountRequest(topic=topic, from_ms=from_ms, to_ms=to_ms)
        return self._unary(self.service.Count, request)

    def nack(
        self,
        topic: str,
        message_ids: Iterable[str],
        reason: str = "",
        redeliver_after_ms: int | str = 0,
        *,
        release: bool = False,
    ) -> pb.NackResponse:
        """Give in-flight messages back: each is a failed attempt, delivered again after
        `redeliver_after_ms`, or when not given after the message's retry policy's backoff
        (the server's default, or its send's `retry`), or dead-lettered at its max_attempts.

        `release=True`: this consumer never started them and is stopping: no attempt is
        counted, they go to the topic's other subscribers at once, and the stream that had
        them is handed no more and ends once it holds none (what `consume` does on stop)."""
        request = pb.NackRequest(
            topic=topic, message_ids=list(message_ids), reason=reason,
            redeliver_after_ms=duration_ms(redeliver_after_ms, "redeliver_after_ms"),
            release=release,
        )  # fmt: skip
        return self._unary(self.service.Nack, request)

    def ack_future(self, topic: str, message_ids: Iterable[str]) -> grpc.Future:
        request = pb.AckRequest(topic=topic, message_ids=list(message_ids))
        return self.service.Ack.future(request, timeout=self.timeout_s)

    def consume(
        self,
        topic: str,
        handler: Callable[[Message], object],
        *,
        concurrency: int = 1,
        max_in_flight: int = 0,
        stop: threading.Event | None = None,
        ack_linger_ms: int = DEFAULT_ACK_LINGER_MS,
    ) -> int:
        """Call `handler(message)` for each delivered message on `concurrency` threads; ack
        it when the handler returns, nack it when it raises; until `stop` is set (even on
        an idle topic) or the stream ends. Returns how many were acked. Settlements go in
        batches, gathering `ack_linger_ms` (timerwheel/acks.py). Details:
        timerwheel/consumer.py."""
        return consume(
            self, topic, handler, concurrency=concurrency, max_in_flight=max_in_flight,
            stop=stop, ack_linger_ms=ack_linger_ms,
        )  # fmt: skip

    # -- health ------------------------------------------------------------------------
    def health_status(self, service: str = "") -> str:
        """SERVING / NOT_SERVING / ... of `service` ("" = the whole server)."""
        response = self._unary(self.health.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until every connection is up (raises grpc.FutureTimeoutError otherwise).

        With several connections to a server of several workers, it then spreads them
        evenly over the workers, dialling again a connection whose worker has two more
        of them than another (timerwheel.connections); `connection_workers` says where
        each went. Call it before the client's other calls: a connection dialled again
        is closed."""
        deadline = time.monotonic() + timeout_s
        for channel in self.channels:
            channel_ready(channel, deadline)
        if len(self.channels) > 1:
            channels, self.connection_workers = spread(self.channels, self._redial, deadline)
            self._use(channels)

    def cluster_map(self) -> pb.ClusterMapResponse:
        """The cluster's partitions and each one's owner, address and epoch as the node
        asked knows them; a single node answers `cluster` False."""
        return self._unary(self.service.ClusterMap, pb.ClusterMapRequest())

    def close(self) -> None:
        if self.router is not None:
            self.router.close()
        for channel in self.channels:
            channel.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _routed(self, name: str, request, message_id: str, retry: bool = False):
        """The call `name` on `message_id`: at the owner of its partition when the client
        routes and knows it (marked direct: answered there or "not owner"); on a "not
        owner" or UNAVAILABLE answer the map is read again and the call made once more,
        at the owner the new map names (or at the target, which forwards it)."""
        router = self.router
        stub = router.owner_stub(message_id) if router is not None else None
        if stub is None:
            return self._unary(getattr(self.service, name), request, retry=retry)
        direct = functools.partial(getattr(stub, name), metadata=DIRECT_METADATA)
        try:
            return call_retrying(direct, request, self.timeout_s, unavailable=False)
        except grpc.RpcError as error:
            if not reroutable(error):
                raise RemoteError.of(error) from None
        router.refresh()
        stub = router.owner_stub(message_id)
        method = getattr(self.service, name)
        if stub is not None:
            method = functools.partial(getattr(stub, name), metadata=DIRECT_METADATA)
        return self._unary(method, request, retry=retry)

    def _unary(self, method, request, timeout_s: object = _CLIENT_TIMEOUT, retry: bool = False):
        """One call, sent again after a refusal that stored nothing (a send while the
        server's fires run late); `retry`: also on UNAVAILABLE, with backoff, for a
        request that is idempotent though its method is not (the idempotent methods are
        retried by gRPC itself). timerwheel/retries.py."""
        timeout = self.timeout_s if timeout_s is _CLIENT_TIMEOUT else timeout_s
        try:
            return call_retrying(method, request, timeout, self.retry, unavailable=retry)  # type: ignore[arg-type]
        except grpc.RpcError as error:
            raise RemoteError.of(error) from None


def _owner_channel(
    address: str, *, tls: Tls | bool | None, token: str | None, options: list
) -> grpc.Channel:
    """A channel to a cluster node the map names, with the client's credentials."""
    return open_channels(address, tls, token, options, 1)[0]


TimerClient = Client  # the name before `timerwheel.Client`; existing callers keep working
