"""What the sync and async clients share: requests, answers, errors, the target address.

Building a request and reading an answer is the same for `timerwheel.Client` and
`timerwheel.AsyncClient`, so it lives here once: `send_request` (durations like "2s"
accepted wherever the API takes milliseconds), `send_result`, `TimerInfo` (a stored
timer whose `state` is a `State` name) and `RemoteError`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from datetime import datetime, timedelta

import grpc

from timerwheel.common import SendResult, State, TimerwheelError
from timerwheel.durations import duration_ms
from timerwheel.retries import RETRY_OPTIONS, retry_after_ms
from timerwheel.v1 import timerwheel_pb2 as pb

DEFAULT_PORT = 7070
DEFAULT_TARGET = f"127.0.0.1:{DEFAULT_PORT}"
# A connection whose server stopped answering is given up after 30 + 10 s, so calls and
# Subscribe streams fail over (UNAVAILABLE, retried) instead of waiting on it. Every 30 s
# is well inside the server's policy for clients' pings (one every 10 s at most by default,
# calls or none: timerwheel.server.keepalive), so it never draws GOAWAY "too_many_pings".
KEEPALIVE_TIME_MS = 30_000
KEEPALIVE_OPTIONS = [
    ("grpc.keepalive_time_ms", KEEPALIVE_TIME_MS),
    ("grpc.keepalive_timeout_ms", 10_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),  # pinging on while idle (gRPC stops at 2)
]
CHANNEL_OPTIONS = [
    ("grpc.max_receive_message_length", -1),  # a DeliveryBatch or Get may exceed 4 MiB
    ("grpc.max_send_message_length", -1),
    *RETRY_OPTIONS,  # idempotent calls ride through a server restart (timerwheel/retries.py)
    *KEEPALIVE_OPTIONS,
]


class RemoteError(TimerwheelError):
    """The server (or the channel) refused a call: `code` is the gRPC status code.
    `retry_after_ms` is set (else None) when the server said it stored nothing and the
    call may be made again after that long (a send while its fires run late; the
    clients have retried it until their deadline already, timerwheel/retries.py)."""

    def __init__(
        self, code: grpc.StatusCode, details: str, retry_after_ms: int | None = None
    ) -> None:
        self.code = code
        self.details = details
        self.retry_after_ms = retry_after_ms
        super().__init__(f"{code.name}: {details}")

    @classmethod
    def of(cls, error: grpc.RpcError) -> RemoteError:
        return cls(error.code(), error.details() or "", retry_after_ms(error))


def with_default_port(target: str) -> str:
    """`localhost` -> `localhost:7070`: a target without a port gets the service's port.

    gRPC itself would dial 443 (its default for a bare host name). Targets with a scheme
    (`unix:/path`, `dns:///host:port`) are left as they are; a bare IPv6 address is
    bracketed (`::1` -> `[::1]:7070`).
    """
    if ":/" in target or target.startswith("unix:"):
        return target
    if target.startswith("["):
        return target if "]:" in target else f"{target}:{DEFAULT_PORT}"
    colons = target.count(":")
    if colons == 0:
        return f"{target}:{DEFAULT_PORT}"
    if colons > 1:  # bare IPv6
        return f"[{target}]:{DEFAULT_PORT}"
    return target


def send_request(
    topic: str,
    body: bytes | str = b"",
    *,
    deliver_at_ms: int | datetime | None = None,
    delay_ms: int | str | timedelta | None = None,
    delay_level: int | None = None,
    properties: Mapping[str, str] | None = None,
    message_id: str = "",
    **more: object,
) -> pb.SendRequest:
    """A SendRequest; give at most one of deliver_at_ms / delay_ms / delay_level.

    `delay_ms` takes milliseconds, a duration string (`"250ms"`, `"2s"`, `"5m"`, `"3d"`,
    the command line's format) or a `timedelta`; `deliver_at_ms` takes epoch ms or an
    aware `datetime`. `more` sets further SendRequest fields by name. A bad value raises
    ValueError here, before anything is sent.
    """
    times = {"deliver_at_ms": deliver_at_ms, "delay_ms": delay_ms, "delay_level": delay_level}
    given = {name: value for name, value in times.items() if value is not None}
    if len(given) > 1:
        raise ValueError(f"give one of deliver_at_ms, delay_ms, delay_level, not {given}")
    if delay_ms is not None:
        given["delay_ms"] = duration_ms(delay_ms, "delay_ms")
    if isinstance(deliver_at_ms, datetime):
        if deliver_at_ms.tzinfo is None:
            raise ValueError(f"deliver_at_ms={deliver_at_ms!r}: give an aware datetime")
        given["deliver_at_ms"] = round(deliver_at_ms.timestamp() * 1000)
    return pb.SendRequest(
        topic=topic,
        body=body.encode() if isinstance(body, str) else body,
        properties=properties or {},
        message_id=message_id,
        **given,
        **more,
    )


def send_result(response: pb.SendResponse) -> SendResult:
    if not response.existed:
        return SendResult(response.message_id, response.deliver_at_ms)
    state = State(response.existing_state)
    return SendResult(response.message_id, response.deliver_at_ms, True, state)


class TimerInfo:
    """A stored timer as `get` and `list` return it: the `TimerMessage` fields, with
    `state` as a `State` (an IntEnum: `info.state.name == "FIRED"`, and it still equals
    the proto's int). `proto` is the raw `timerwheel.v1.TimerMessage`."""

    __slots__ = ("proto",)

    def __init__(self, proto: pb.TimerMessage) -> None:
        self.proto = proto

    @property
    def state(self) -> State:
        return State(self.proto.state)

    def __getattr__(self, name: str) -> object:
        return getattr(self.proto, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimerInfo) and other.proto == self.proto

    __hash__ = None  # mutable proto inside, like the proto itself

    def __repr__(self) -> str:
        return (
            f"TimerInfo(message_id={self.proto.message_id!r}, topic={self.proto.topic!r}, "
            f"state={self.state.name}, deliver_at_ms={self.proto.deliver_at_ms})"
        )


def timer_filter(
    topic: str = "", series_id: str = "", id_prefix: str = "", from_ms: int = 0, to_ms: int = 0
) -> pb.TimerFilter:
    """What a bulk call (bulk_cancel, purge, redrive) selects: every field given must match."""
    return pb.TimerFilter(
        topic=topic, series_id=series_id, id_prefix=id_prefix, from_ms=from_ms, to_ms=to_ms
    )


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
