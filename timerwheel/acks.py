"""Acks and nacks sent in batches: `Settlements` collects them, `AckSender` sends them.

An Ack call per message costs an RPC per message; one per delivery batch costs one per
batch, and under a steady load batches are small (a timer is due every fraction of a
millisecond, so the server hands out what is due each millisecond or so). At a few
thousand messages a second that is about 1,000 Ack calls a second, and their RPCs took
more of the server's CPU than everything else it does for a message (docs/lab-log.md has
the runs). So settlements are batched in time instead:

* once something waits, the sender gathers for up to `linger_ms` more before it sends,
  so a steady stream costs about 1000 / linger_ms calls a second whatever its rate.
  Pulsar's consumers do the same ("acknowledgment grouping", 100 ms by default);
  RocketMQ's commit consumed offsets every 5 s;
* what is settled while a call is on the wire waits for the *gate* (`gate_wait_s`): the
  newest call has returned, or has been out a whole linger. A call that returns within
  the linger (a light load) therefore leaves one call on the wire at a time, as before;
  one that takes longer (the server's commit queue under load: each Ack is answered
  after its group commit's fsync) no longer holds the next batch back, and up to
  `max_calls` (default 4) are on the wire at once.

Why the gate matters: the server hands a subscriber no more than its window
(`max_in_flight`) of un-acked messages, and frees room when an Ack arrives. With one
call on the wire, a consumer takes at most a window per (linger + Ack round trip). At a
high rate, with the server's default window and Acks answered after several lingers, the
gate lets a consumer take about a fifth more a second; with the server at its ceiling it
also makes somewhat more Ack calls (docs/lab-log.md has the runs).

Ids go in calls of at most `MAX_IDS_PER_ACK`, the server's default limit. Closing
the sender cuts the linger and the gate short: what waits is sent at once, and close()
returns once every call has been answered. A message settled but not yet sent when its
process dies is delivered again, as any un-acked one: delivery stays at least once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
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
# Batches on the wire at once at most. Under load a batch goes about every two lingers
# (the gate, then the gathering), so 4 covers Ack round trips up to ~80 ms at the
# default linger without waiting; longer ones wait for a return.
MAX_ACK_CALLS_ON_WIRE = 4


def in_calls(message_ids: list[str], max_ids: int = MAX_IDS_PER_ACK) -> list[list[str]]:
    """The ids of one Ack cut into calls the server takes."""
    return [message_ids[start : start + max_ids] for start in range(0, len(message_ids), max_ids)]


def check_linger_ms(linger_ms: int) -> int:
    if isinstance(linger_ms, bool) or not isinstance(linger_ms, int) or linger_ms < 0:
        raise ValueError(f"ack_linger_ms={linger_ms!r}: must be a whole number of ms >= 0")
    return linger_ms


def check_whole(name: str, value: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name}={value!r}: must be a whole number >= 1")
    return value


def gate_wait_s(
    calls_on_wire: int, newest_out_s: float | None, linger_s: float, max_calls: int
) -> float | None:
    """How long the next batch waits before it may start gathering (the module doc's gate).

    `newest_out_s` is how long the newest call has been on the wire, None once it has
    returned (or with no call yet). 0.0: it may start now; None: `max_calls` are on the
    wire, so it waits for one of them to return, however long that takes.
    """
    if calls_on_wire >= max_calls:
        return None
    if newest_out_s is None:
        return 0.0
    return max(0.0, linger_s - newest_out_s)


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

    A batch's calls run on one of `max_calls` call threads, so several can be on the
    wire. A failed call is kept in `error` (the first one), its ids counted in
    `failed_ids`, and the sender goes on.
    `on_answer(round_trip_ms, ids)`, if given, is called once each batch is answered
    (or has failed), one call at a time: how long a server takes to answer Acks is what
    holds a consumer's window (docs/architecture.md, "The gRPC front").
    """

    def __init__(
        self, client: Client, topic: str, linger_ms: int = DEFAULT_ACK_LINGER_MS,
        max_ids: int = MAX_IDS_PER_ACK, max_calls: int = MAX_ACK_CALLS_ON_WIRE,
        on_answer: Callable[[int, int], None] | None = None,
    ) -> None:  # fmt: skip
        self.client = client
        self.topic = topic
        self.linger_s = check_linger_ms(linger_ms) / 1000
        self.max_ids = check_whole("max_ids", max_ids)
        self.max_calls = check_whole("max_calls", max_calls)
        self.settlements = Settlements()
        self.settlements.wake = self._wake
        self._on_answer = on_answer
        self.acked = 0  # confirmed by the server
        # Ids in calls that failed: settled or not, the caller cannot know (a server that
        # went away may have applied them); one not applied is delivered again.
        self.failed_ids = 0
        # Ids in Ack calls that were answered: `acked` of them were FIRED and are now
        # ACKED; the rest were settled already (a duplicate receipt, or an attempt of
        # this very call that gRPC retried after its answer was lost).
        self.answered_ids = 0
        self.error: RemoteError | None = None
        self._cond = threading.Condition()
        self._closed = False
        self._on_wire = 0  # batches sent and not yet answered
        self._sent = 0  # batches sent so far: the newest one's number
        self._newest_sent_at: float | None = None  # monotonic; None once it returned
        self._calls = ThreadPoolExecutor(max_calls, thread_name_prefix="timerwheel-ack-call")
        self._thread = threading.Thread(target=self._run, name="timerwheel-acks", daemon=True)
        self._thread.start()

    def ack(self, message_ids: Iterable[str]) -> None:
        self.settlements.ack(message_ids)

    def nack(self, message_ids: Iterable[str], reason: str = "") -> None:
        self.settlements.nack(message_ids, reason)

    def close(self) -> None:
        """Send what waits now, wait for every call's answer, then stop the threads."""
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
                while not self._closed and (wait_s := self._gate_wait_s()) != 0.0:
                    self._cond.wait(wait_s)  # None: until a call returns
                if self.linger_s:  # gather more; close() cuts it short
                    self._cond.wait_for(lambda: self._closed, timeout=self.linger_s)
                closed = self._closed
            self._send_batch(*self.settlements.take())
            if closed and not self.settlements.waiting:
                self._calls.shutdown(wait=True)  # every call answered
                return

    def _gate_wait_s(self) -> float | None:
        sent_at = self._newest_sent_at
        newest_out_s = None if sent_at is None else time.monotonic() - sent_at
        return gate_wait_s(self._on_wire, newest_out_s, self.linger_s, self.max_calls)

    def _send_batch(self, acks: list[str], nacks: dict[str, list[str]]) -> None:
        if not acks and not nacks:
            return
        with self._cond:
            self._on_wire += 1
            self._sent += 1
            self._newest_sent_at = time.monotonic()
            number = self._sent
        self._calls.submit(self._call, number, acks, nacks)

    def _call(self, number: int, acks: list[str], nacks: dict[str, list[str]]) -> None:
        acked = 0
        error = None
        unanswered = len(acks) + sum(map(len, nacks.values()))
        answered_acks = 0
        sent_at = time.monotonic()
        try:
            for ids in in_calls(acks, self.max_ids):
                acked += self.client.ack(self.topic, ids)
                answered_acks += len(ids)
                unanswered -= len(ids)
            for reason, message_ids in nacks.items():
                self.client.nack(self.topic, message_ids, reason)
                unanswered -= len(message_ids)
        except RemoteError as exc:
            error = exc
        finally:  # whatever happened, the call is off the wire
            with self._cond:
                self.acked += acked
                self.failed_ids += unanswered if error is not None else 0
                self.answered_ids += answered_acks
                self.error = self.error or error
                self._on_wire -= 1
                if number == self._sent:
                    self._newest_sent_at = None
                self._cond.notify()
                if self._on_answer is not None:
                    ids = len(acks) + sum(map(len, nacks.values()))
                    self._on_answer(round((time.monotonic() - sent_at) * 1000), ids)
