"""A collector that consumes a Subscribe stream on a thread of its own, and a producer that
sends batches on one. Every wait is on a condition with a bounded timeout."""

from __future__ import annotations

import threading
from collections.abc import Callable

import grpc

from helpers.time_of_day import wall_ms
from helpers.waits import WAIT_S
from timerwheel.client import RemoteError, TimerClient
from timerwheel.v1 import timerwheel_pb2 as pb


class Collector:
    """Reads a Subscribe stream on a thread; records each delivery with its arrival time.

    `auto_ack` acks each batch as it arrives. Waits use a Condition with a timeout.
    """

    def __init__(
        self, client: TimerClient, topic: str, *, max_in_flight: int = 0, auto_ack: bool = True
    ) -> None:
        self.client = client
        self.topic = topic
        self.auto_ack = auto_ack
        self.deliveries: list[tuple[pb.Delivery, int]] = []  # (delivery, arrival wall ms)
        self.batch_sizes: list[int] = []
        self.error: Exception | None = None
        self.ended = threading.Event()
        self._cond = threading.Condition()
        self.subscription = client.subscribe(topic, max_in_flight)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for batch in self.subscription:
                arrived = wall_ms()
                if self.auto_ack:
                    self.client.ack(self.topic, [d.message_id for d in batch])
                with self._cond:
                    self.batch_sizes.append(len(batch))
                    self.deliveries.extend((d, arrived) for d in batch)
                    self._cond.notify_all()
        except Exception as exc:  # recorded for the test to assert on
            self.error = exc
        finally:
            self.ended.set()
            with self._cond:
                self._cond.notify_all()

    def ids(self) -> list[str]:
        with self._cond:
            return [d.message_id for d, _ in self.deliveries]

    def wait_for(self, predicate: Callable[[Collector], bool], timeout_s: float = WAIT_S) -> bool:
        """Wait until `predicate(self)` holds (True) or the timeout passes (False)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: predicate(self) or self.ended.is_set(), timeout_s
            ) and predicate(self)

    def wait_count(self, count: int, timeout_s: float = WAIT_S) -> list[pb.Delivery]:
        if not self.wait_for(lambda c: len(c.deliveries) >= count, timeout_s):
            raise AssertionError(
                f"got {len(self.deliveries)} of {count} deliveries in {timeout_s}s "
                f"(stream error: {self.error})"
            )
        with self._cond:
            return [d for d, _ in self.deliveries]

    def stop(self) -> None:
        self.subscription.cancel()
        self.ended.wait(WAIT_S)


class Producer:
    """Sends batches on a thread until stopped or refused; remembers what was acknowledged."""

    def __init__(self, target: str, topic: str, delay_ms: int) -> None:
        self.client = TimerClient(target, timeout_s=WAIT_S)
        self.topic, self.delay_ms = topic, delay_ms
        self.acknowledged: list[str] = []
        self.errors: list[grpc.StatusCode] = []
        self.batches = 0
        self.stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = 0
        while not self.stop.is_set():
            requests = [
                TimerClient.request(self.topic, f"p{index + i}", delay_ms=self.delay_ms)
                for i in range(50)
            ]
            index += 50
            try:
                results = self.client.send_batch(requests)
            except RemoteError as exc:
                self.errors.append(exc.code)
                break
            with self._cond:
                self.acknowledged.extend(r.message_id for r in results)
                self.batches += 1
                self._cond.notify_all()
        with self._cond:
            self.stop.set()
            self._cond.notify_all()

    def wait_batches(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.batches >= count, WAIT_S), self.errors

    def join(self) -> None:
        self.stop.set()
        self._thread.join(WAIT_S)
        self.client.close()
