"""A small typed Python client of the timerwheel gRPC API (used by the CLI and load tests).

    with TimerClient("127.0.0.1:7070") as client:
        sent = client.send("orders", b"hello", delay_ms=90_000)
        client.get(sent.message_id).state            # timerwheel.v1.State value
        for batch in client.subscribe("orders"):     # list[Delivery] per stream item
            ...; client.ack("orders", [d.message_id for d in batch])

Failures raise `RemoteError` (a `TimerwheelError`) carrying the gRPC status code and the
server's message. For throughput, build requests once with `TimerClient.request(...)` and
use `send_batch` / `send_batch_future` (one RPC, one group commit per batch), and
`consume`, which acks each batch with a pipelined (non-blocking) Ack. The raw stubs are
`client.service`, `client.admin` and `client.health` for anything else.

A secured server (docs/security.md): `TimerClient(target, tls=Tls(ca_file=...),
token=...)`; see `timerwheel.credentials`.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from timerwheel.credentials import Tls, open_channel
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from wheels.domain import SendResult, State, TimerwheelError

DEFAULT_TARGET = "127.0.0.1:7070"
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),  # a DeliveryBatch or Get may exceed 4 MiB
    ("grpc.max_send_message_length", -1),
]
_CLIENT_TIMEOUT = object()  # _unary default: the client's timeout_s
MAX_PENDING_ACKS = 16  # consume(): acks in flight before waiting for the oldest


class RemoteError(TimerwheelError):
    """The server (or the channel) refused a call: `code` is the gRPC status code."""

    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        self.code = code
        self.details = details
        super().__init__(f"{code.name}: {details}")

    @classmethod
    def of(cls, error: grpc.RpcError) -> RemoteError:
        return cls(error.code(), error.details() or "")


class Subscription:
    """A live Subscribe stream: iterate for `list[Delivery]` batches; `cancel()` ends it."""

    def __init__(self, call: Iterator[pb.DeliveryBatch]) -> None:
        self._call = call

    def __iter__(self) -> Iterator[list[pb.Delivery]]:
        try:
            for batch in self._call:
                yield list(batch.deliveries)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                raise RemoteError.of(error) from None

    def cancel(self) -> None:
        self._call.cancel()  # the server redelivers whatever was not acked

    def __enter__(self) -> Subscription:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()


class TimerClient:
    def __init__(
        self,
        target: str = DEFAULT_TARGET,
        *,
        timeout_s: float | None = 30.0,
        tls: Tls | bool | None = None,
        token: str | None = None,
    ) -> None:
        """`tls`: a `Tls` (or True: the system's trusted roots); `token`: the bearer token."""
        self.target = target
        self.timeout_s = timeout_s
        self.channel = open_channel(target, tls, token, CHANNEL_OPTIONS)
        self.service = pb_grpc.TimerServiceStub(self.channel)
        self.admin = pb_grpc.TimerAdminStub(self.channel)
        self.health = health_pb2_grpc.HealthStub(self.channel)

    # -- building requests ------------------------------------------------------------------
    @staticmethod
    def request(
        topic: str,
        body: bytes | str = b"",
        *,
        deliver_at_ms: int | None = None,
        delay_ms: int | None = None,
        delay_level: int | None = None,
        properties: Mapping[str, str] | None = None,
        message_id: str = "",
        **more: object,
    ) -> pb.SendRequest:
        """A SendRequest; give at most one of deliver_at_ms / delay_ms / delay_level.
        `more` sets further SendRequest fields (if_exists=, repeat=, max_attempts=, ...)."""
        times = {"deliver_at_ms": deliver_at_ms, "delay_ms": delay_ms, "delay_level": delay_level}
        given = {name: value for name, value in times.items() if value is not None}
        if len(given) > 1:
            raise ValueError(f"give one of deliver_at_ms, delay_ms, delay_level, not {given}")
        return pb.SendRequest(
            topic=topic,
            body=body.encode() if isinstance(body, str) else body,
            properties=properties or {},
            message_id=message_id,
            **given,
            **more,
        )

    # -- the TimerService calls -------------------------------------------------------------
    def send(self, topic: str, body: bytes | str = b"", **when_and_more: object) -> SendResult:
        """`send(topic, body, delay_ms=..., properties=..., message_id=...)`."""
        response = self._unary(self.service.Send, self.request(topic, body, **when_and_more))
        return SendResult(response.message_id, response.deliver_at_ms)

    def send_batch(self, requests: Sequence[pb.SendRequest]) -> list[SendResult]:
        """Many sends in one RPC; the server stores them atomically (all or none)."""
        response = self._unary(self.service.SendBatch, pb.SendBatchRequest(messages=requests))
        return [SendResult(r.message_id, r.deliver_at_ms) for r in response.results]

    def send_batch_future(self, requests: Sequence[pb.SendRequest]) -> grpc.Future:
        """Non-blocking SendBatch: `.result()` is a SendBatchResponse (or raises RpcError)."""
        return self.service.SendBatch.future(
            pb.SendBatchRequest(messages=requests), timeout=self.timeout_s
        )

    def cancel(self, message_id: str) -> State:
        response = self._unary(self.service.Cancel, pb.CancelRequest(message_id=message_id))
        return State(response.state)

    def get(self, message_id: str, include_body: bool = True) -> pb.TimerMessage:
        return self._unary(
            self.service.Get, pb.GetRequest(message_id=message_id, include_body=include_body)
        )

    def list(
        self, topic: str, from_ms: int = 0, to_ms: int = 0, limit: int = 0, page_token: str = ""
    ) -> tuple[list[pb.TimerMessage], str]:
        """One page of pending timers due in [from_ms, to_ms) (to_ms=0: no upper bound)."""
        request = pb.ListRequest(
            topic=topic, from_ms=from_ms, to_ms=to_ms, limit=limit, page_token=page_token
        )
        response = self._unary(self.service.List, request)
        return list(response.messages), response.next_page_token

    def list_all(
        self, topic: str, from_ms: int = 0, to_ms: int = 0, limit: int = 0
    ) -> Iterator[pb.TimerMessage]:
        """Every page, following next_page_token."""
        token = ""
        while True:
            page, token = self.list(topic, from_ms, to_ms, limit, token)
            yield from page
            if not token:
                return

    def subscribe(self, topic: str, max_in_flight: int = 0) -> Subscription:
        """Open a stream of fired messages (no deadline); iterate it for batches."""
        return Subscription(
            self.service.Subscribe(pb.SubscribeRequest(topic=topic, max_in_flight=max_in_flight))
        )

    def ack(self, topic: str, message_ids: Iterable[str]) -> int:
        request = pb.AckRequest(topic=topic, message_ids=list(message_ids))
        return self._unary(self.service.Ack, request).acked

    def reschedule(self, message_id: str, **when: int) -> int:
        """Move a SCHEDULED timer: one of deliver_at_ms=, delay_ms=, delay_level=.
        Returns its new deliver time."""
        request = pb.RescheduleRequest(message_id=message_id, **when)
        return self._unary(self.service.Reschedule, request).deliver_at_ms

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
        redeliver_after_ms: int = 0,
    ) -> pb.NackResponse:
        """Give in-flight messages back: each is a failed attempt, delivered again at once
        or after `redeliver_after_ms` (or dead-lettered at its max_attempts)."""
        request = pb.NackRequest(
            topic=topic, message_ids=list(message_ids), reason=reason,
            redeliver_after_ms=redeliver_after_ms,
        )  # fmt: skip
        return self._unary(self.service.Nack, request)

    def ack_future(self, topic: str, message_ids: Iterable[str]) -> grpc.Future:
        request = pb.AckRequest(topic=topic, message_ids=list(message_ids))
        return self.service.Ack.future(request, timeout=self.timeout_s)

    def consume(
        self,
        topic: str,
        handler: Callable[[list[pb.Delivery]], None],
        *,
        max_in_flight: int = 0,
        stop: threading.Event | None = None,
    ) -> int:
        """Subscribe; call `handler(batch)`, then ack the batch (pipelined) until `stop`.

        A batch is acked only after `handler` returns, so a handler that raises leaves
        it un-acked (the server redelivers it). Returns the number of messages handled.
        `stop` is checked between batches; cancel from another thread with `stop.set()`
        followed by the next batch or stream end.
        """
        handled = 0
        pending: deque[grpc.Future] = deque()
        subscription = self.subscribe(topic, max_in_flight)
        try:
            for batch in subscription:
                handler(batch)
                handled += len(batch)
                pending.append(self.ack_future(topic, [d.message_id for d in batch]))
                while len(pending) > MAX_PENDING_ACKS or (pending and pending[0].done()):
                    _result(pending.popleft())
                if stop is not None and stop.is_set():
                    break
            while pending:
                _result(pending.popleft())
        finally:
            subscription.cancel()
        return handled

    # -- TimerAdmin and health --------------------------------------------------------------
    def export(self, out_dir: str, max_rows_per_file: int = 0) -> pb.ExportResponse:
        request = pb.ExportRequest(out_dir=out_dir, max_rows_per_file=max_rows_per_file)
        return self._unary(self.admin.Export, request, timeout_s=None)  # may take minutes

    def stats(self) -> pb.StatsResponse:
        return self._unary(self.admin.Stats, pb.StatsRequest())

    def health_status(self, service: str = "") -> str:
        """SERVING / NOT_SERVING / ... of `service` ("" = the whole server)."""
        response = self._unary(self.health.Check, health_pb2.HealthCheckRequest(service=service))
        return health_pb2.HealthCheckResponse.ServingStatus.Name(response.status)

    def wait_ready(self, timeout_s: float = 10.0) -> None:
        """Block until the channel connects (raises grpc.FutureTimeoutError otherwise)."""
        grpc.channel_ready_future(self.channel).result(timeout=timeout_s)

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> TimerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _unary(self, method, request, timeout_s: object = _CLIENT_TIMEOUT):
        timeout = self.timeout_s if timeout_s is _CLIENT_TIMEOUT else timeout_s
        try:
            return method(request, timeout=timeout)
        except grpc.RpcError as error:
            raise RemoteError.of(error) from None


def _result(future: grpc.Future):
    try:
        return future.result()
    except grpc.RpcError as error:
        raise RemoteError.of(error) from None
