"""The delivery hub's API in a gRPC worker process: calls to the delivery process.

`TimerService` and `TimerAdmin` use it exactly as they use an in-process `DeliveryHub`.
`close()` (the worker is stopping) ends every Subscribe stream of this worker with
ShuttingDown (UNAVAILABLE): their un-acked messages stay with the hub and go to the
streams that remain, or come again after a restart. Streams and unary calls (Ack, Stats)
use separate connections, so acks in progress still complete while the worker drains;
`disconnect()` closes those last.
"""

from __future__ import annotations

import contextlib
from collections.abc import Generator

from timerwheel.delivery.api import DeliveryApi
from timerwheel.delivery.hub import IDLE_WAKE_S
from timerwheel.delivery.inspect import InFlightRow
from timerwheel.delivery.subscriber import DeliveryRow
from timerwheel.procs.ipc import CallClient, PeerUnavailable, PendingCall
from timerwheel.wheels.domain import ShuttingDown


class RemoteSubscriber:
    """A Subscribe stream's handle; `close()` may be called from any thread."""

    def __init__(self, number: int, calls: CallClient) -> None:
        self.number = number
        self._calls = calls

    def close(self) -> None:
        with contextlib.suppress(PeerUnavailable):  # gone: the stream ends anyway
            self._calls.call("close_subscriber", self.number)


class RemoteHub(DeliveryApi[RemoteSubscriber]):
    def __init__(self, socket_path: str, authkey: bytes) -> None:
        self._streams = CallClient(socket_path, authkey, "delivery")
        self._unary = CallClient(socket_path, authkey, "delivery")
        self._closed = False

    def subscribe(
        self, topic: str, max_in_flight: int, identity: str = "", name: str = ""
    ) -> RemoteSubscriber:
        self._check_open()
        number = self._streams.call("subscribe", topic, max_in_flight, identity, name)
        return RemoteSubscriber(number, self._unary)

    def batches(self, subscriber: RemoteSubscriber) -> Generator[list[DeliveryRow], None, None]:
        """`DeliveryHub.batches` across the process boundary, one batch read ahead.

        The next batch is asked for before this one is yielded, so the delivery process
        (and the engine behind it) pick it while this process decodes, builds and sends
        this one; asked for after, the three processes took turns, each idle while
        another worked: a burst went out with none of them busy, for want of overlap,
        not CPU (docs/lab-log.md has the runs). A batch read ahead is
        in flight at the subscriber from the moment it is taken, within its
        `max_in_flight` like any other. A stream that ends with one read ahead closes
        its subscriber first, so the delivery process answers at once; the messages in
        it are redelivered when the stream is released, as any it had in flight.
        """
        self._check_open()
        pending: PendingCall | None = self._streams.begin(
            "next_batch", subscriber.number, IDLE_WAKE_S
        )
        try:
            while pending is not None:  # always, at the top: set before each yield
                call, pending = pending, None
                rows = call.result()
                if rows is None:
                    return
                self._check_open()
                pending = self._streams.begin("next_batch", subscriber.number, IDLE_WAKE_S)
                yield rows  # as the delivery process sent them: the stream decodes them
        finally:
            if pending is not None:
                subscriber.close()
                # Read back only to free the connection: the stream ends either way, so
                # an error (the peer gone; anything else the delivery process has logged)
                # must not keep the caller from releasing the subscriber.
                with contextlib.suppress(Exception):
                    pending.result()

    def release(self, subscriber: RemoteSubscriber) -> None:
        with contextlib.suppress(PeerUnavailable):  # gone, and its subscribers with it
            self._unary.call("release", subscriber.number)

    def ack(self, topic: str, message_ids: list[str]) -> int:
        return self._unary.call("ack", topic, message_ids)

    def nack(
        self, topic: str, message_ids: list[str], reason: str = "", redeliver_after_ms: int = 0,
        release: bool = False,
    ) -> tuple[int, int]:  # fmt: skip
        return self._unary.call("nack", topic, message_ids, reason, redeliver_after_ms, release)

    def write_trace(self, message_ids: list[str]) -> None:
        self._unary.call("write_trace", message_ids)

    def unacked(self) -> int:
        return self._unary.call("unacked")

    def subscriber_count(self) -> int:
        return self._unary.call("subscriber_count")

    def in_flight(self, topic: str, limit: int) -> tuple[list[InFlightRow], int, int]:
        return self._unary.call("in_flight", topic, limit)

    def consumers(self, topic: str = "") -> list[dict]:
        return self._unary.call("consumers", topic)

    def oldest_fired_at(self, topics: list[str]) -> dict[str, int]:
        return self._unary.call("oldest_fired_at", topics)

    def close(self) -> None:
        """End this worker's streams: a stream waiting for a batch sees ShuttingDown.
        Its subscribers are released by the delivery process as their connections end."""
        self._closed = True
        self._streams.close()

    def disconnect(self) -> None:
        """After the last call: close the unary connections too."""
        self._unary.close()

    def _check_open(self) -> None:
        if self._closed:
            raise ShuttingDown("the server is shutting down")
