"""Acks and nacks sent in batches: `Settlements` collects them, `AckSender` sends them.

An Ack call per message costs an RPC per message; one per delivery batch costs one per
batch, and under a steady load batches are small (a timer is due every fraction of a
millisecond, so the server hands out what is due each millisecond or so). At 5,000
messages a second that was about 1,000 Ack calls a second, and their RPCs took more of
the server's CPU than everything else it does for a message (docs/benchmarks.md). So
settlements are batched in time instead:

* one Ack (or Nack) on the wire at a time per sender: what is settled meanwhile waits
  (and goes in calls of at most `MAX_IDS_PER_ACK` ids, the server's default limit);
* once something waits, the sender gathers for up to `linger_ms` more before it sends,
  so a steady stream costs about 1000 / linger_ms calls a second whatever its rate.
  Pulsar's consumers do the same ("acknowledgment grouping", 100 ms by default);
  RocketMQ's commit consumed offsets every 5 s.

Closing the sender cuts the linger short: what waits is sent at once. A message settled
but not yet sent when its process dies is delivered again, as any un-acked one: delivery
stays at least once.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import TYPE_CHECKING

from timerwheel.types import RemoteError

if TYPE_CHECKING:
    from timerwheel.client import Client

# Long enough to gather a few delivery batches under load, short enough that an acked
# message is settled on the server within a blink.
DEFAULT_ACK_LINGER_MS = 10
# Ids in one Ack call at most: the server's default `max_ack_ids` (it refuses more with
# INVALID_ARGUMENT); a burst gathers more than that within one linger.
MAX_IDS_PER_ACK = 10_000


def in_calls(message_ids: list[str], max_ids: int = MAX_IDS_PER_ACK) -> list[list[str]]:
    """The ids of one Ack cut into calls the server takes."""
    return [message_ids[start : start + max_ids] for start in range(0, len(message_ids), max_ids)]


def check_linger_ms(linger_ms: int) -> int:
    if isinstance(linger_ms, bool) or not isinstance(linger_ms, int) or linger_ms < 0:
        raise ValueError(f"ack_linger_ms={linger_ms!r}: must be a whole number of ms >= 0")
    return linger_ms


class Settlements:
    """Acks and nacks waiting to be sent; thread-safe. `wake` is called after each add."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._acks: list[str] = []
        self._nacks: list[tuple[str, str]] = []  # (message id, reason)
        self.wake = lambda: None

    def ack(self, message_ids: Iterable[str]) -> None:
        with self._lock:
            self._acks.extend(message_ids)
        self.wake()

    def nack(self, message_ids: Iterable[str], reason: str = "") -> None:
        with self._lock:
            self._nacks.extend((message_id, reason) for message_id in message_ids)
        self.wake()

    @property
    def waiting(self) -> bool:
        with self._lock:
            return bool(self._acks or self._nacks)

    def take(self) -> tuple[list[str], dict[str, list[str]]]:
        """Everything waiting: the acks, and the nacks grouped by reason (a call each)."""
        with self._lock:
            acks, nacks = self._acks, self._nacks
            self._acks, self._nacks = [], []
        by_reason: dict[str, list[str]] = {}
        for message_id, reason in nacks:
            by_reason.setdefault(reason, []).append(message_id)
        return acks, by_reason


class AckSender:
    """A thread that sends one topic's settlements in batches (see the module doc).

        with AckSender(client, "orders", linger_ms=10) as sender:
            sender.ack(["id-1", "id-2"])      # returns at once; sent within ~10 ms
        sender.acked                          # how many the server confirmed acked

    A failed call is kept in `error` (the first one) and the sender goes on.
    """

    def __init__(
        self, client: Client, topic: str, linger_ms: int = DEFAULT_ACK_LINGER_MS,
        max_ids: int = MAX_IDS_PER_ACK,
    ) -> None:  # fmt: skip
        self.client = client
        self.topic = topic
        self.linger_s = check_linger_ms(linger_ms) / 1000
        if isinstance(max_ids, bool) or not isinstance(max_ids, int) or max_ids < 1:
            raise ValueError(f"max_ids={max_ids!r}: must be a whole number >= 1")
        self.max_ids = max_ids
        self.settlements = Settlements()
        self.settlements.wake = self._wake
        self.acked = 0  # confirmed by the server
        self.error: RemoteError | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="timerwheel-acks", daemon=True)
        self._thread.start()

    def ack(self, message_ids: Iterable[str]) -> None:
        self.settlements.ack(message_ids)

    def nack(self, message_ids: Iterable[str], reason: str = "") -> None:
        self.settlements.nack(message_ids, reason)

    def close(self) -> None:
        """Send what waits now, then stop the thread."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join()

    def __enter__(self) -> AckSender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _wake(self) -> None:
        with self._cond:
            self._cond.notify()

    def _run(self) -> None:
        waiting = lambda: self._closed or self.settlements.waiting  # noqa: E731
        while True:
            with self._cond:
                self._cond.wait_for(waiting)
                if self.linger_s:  # gather more; close() cuts it short
                    self._cond.wait_for(lambda: self._closed, timeout=self.linger_s)
                closed = self._closed
            self._send(*self.settlements.take())
            if closed and not self.settlements.waiting:
                return

    def _send(self, acks: list[str], nacks: dict[str, list[str]]) -> None:
        try:
            for ids in in_calls(acks, self.max_ids):
                self.acked += self.client.ack(self.topic, ids)
            for reason, message_ids in nacks.items():
                self.client.nack(self.topic, message_ids, reason)
        except RemoteError as exc:
            self.error = self.error or exc
