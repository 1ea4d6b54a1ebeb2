"""The delivery hub's API as the gRPC front sees it, whichever process the hub runs in.

    TimerService / TimerAdmin (server/) ──DeliveryApi──> ┌ DeliveryHub (same process)
                                                         └ RemoteHub   (procs/: the
                                                                        delivery process)

Both implement it explicitly; the delivery process answers exactly the calls of
`timerwheel.procs.delivery_host.DeliveryHost.handle`. A Subscribe stream gets a handle
from `subscribe`, reads `batches(handle)` (rows the front decodes into Deliveries), and
gives it back with `release(handle)`; `close()` on the handle ends the stream from any
thread.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Protocol, TypeVar

from timerwheel.delivery.inspect import InFlightRow
from timerwheel.delivery.subscriber import DeliveryRow


class SubscriberHandle(Protocol):
    def close(self) -> None:
        """End the stream: its `batches` stop; may be called from any thread."""
        ...


Handle = TypeVar("Handle", bound=SubscriberHandle)


class DeliveryApi(Protocol[Handle]):
    def subscribe(
        self, topic: str, max_in_flight: int, identity: str = "", name: str = ""
    ) -> Handle:
        """A new stream of `topic` for the caller `identity` (`name` in traces)."""
        ...

    def batches(self, subscriber: Handle) -> Generator[list[DeliveryRow], None, None]:
        """The stream's batches until it is closed; [] now and then while idle."""
        ...

    def release(self, subscriber: Handle) -> None:
        """The stream ended: what it had in flight is redelivered at once."""
        ...

    def ack(self, topic: str, message_ids: list[str]) -> int: ...

    def nack(
        self, topic: str, message_ids: list[str], reason: str = "", redeliver_after_ms: int = 0,
        release: bool = False,
    ) -> tuple[int, int]:  # fmt: skip
        """(nacked, of those dead-lettered); `release`: not failed attempts (see
        `DeliveryHub.nack`), so (released, 0)."""
        ...

    def write_trace(self, message_ids: list[str]) -> None:
        """Hand over the held first deliveries of these ids, for a Get with the trace."""
        ...

    def unacked(self) -> int: ...

    def subscriber_count(self) -> int: ...

    def in_flight(self, topic: str, limit: int) -> tuple[list[InFlightRow], int, int]:
        """(messages the hub tracks for `topic`, at most `limit`; how many it tracks; the
        topic's subscribers): TimerAdmin.InFlight."""
        ...

    def consumers(self, topic: str = "") -> list[dict]:
        """The live Subscribe streams of `topic`, or of all (TimerAdmin.Consumers)."""
        ...

    def oldest_fired_at(self, topics: list[str]) -> dict[str, int]:
        """When each topic's oldest fired, un-acked message fired (its lag)."""
        ...

    def close(self) -> None: ...
