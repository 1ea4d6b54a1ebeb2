"""`consume()`: a consumer loop that acks what its handler finished and nacks what failed.

    def handle(message):                      # a Message: .body, .attempt, .ack(), .nack()
        process(message.body)                 # raise: nacked; return: acked

    stop = threading.Event()
    client.consume("orders", handle, concurrency=8, stop=stop)   # until stop.set()
    await async_client.consume("orders", async_handle, concurrency=8, stop=asyncio_event)

The handler is called once per message, on one of `concurrency` threads (tasks for the
async client; an async handler is awaited). When it returns, the message is acked; when
it raises, it is nacked (delivered again after its retry backoff, `attempt` + 1) and the
error is logged. A
handler may settle a message itself first with `message.ack()` or `message.nack()`; the
first settlement wins. Acks and nacks are sent in batches by one sender, so a fast
handler does not cost an RPC per message: gathering for `ack_linger_ms` (default 10) once
something waits, and another call on the wire only once the last has been out a whole
linger (timerwheel/acks.py says why). With
`concurrency=1` messages are handled in delivery order.

Stopping: `consume` returns when `stop` is set (also while the topic is idle: the sync
loop looks at `stop` every 50 ms), when the server ends the stream, or when the loop
ends by an exception. It then hands out no more messages and releases those received
but not yet handed to a handler: a Nack with `release` per batch, which counts no
attempt and gives them at once to the topic's other consumers (`_release`), so a clean
stop, say a rolling deploy with a large prefetch, cannot use up a healthy message's
`max_attempts`. Handlers in progress finish and their acks and nacks are sent as usual.
A stream that released something is handed no more by the server and ends by itself
once it holds nothing: reading it to its end, the consumer releases what was still on
its way, so nothing it never saw is failed as the stream ends. Only a stream that
released nothing is cancelled at once, as before (a batch the server sends in that
instant is counted as an attempt, as for a consumer that goes away). It returns how
many messages the server confirmed acked. A broken stream or a failed Ack raises
`RemoteError` after the same clean-up.

A nack is the Nack RPC: a failed attempt, delivered again (`attempt` + 1) after the
message's retry backoff, which the server applies (the send's `retry`, else the server's
retry_* settings: by default exponential from 1 s, doubling, at most 5 min), or moved to
the dead-letter topic once the message has used its `max_attempts`. A handler's error is
logged with its traceback on a message's first attempt only; its retries log one line
at DEBUG, so a message that always fails neither storms nor floods the log.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from timerwheel.acks import (
    DEFAULT_ACK_LINGER_MS,
    AckSender,
    Settlements,
    in_calls,
)
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb

if TYPE_CHECKING:
    from timerwheel.client import Client

# The standard library's logging, as a client library should use: the application
# configures it (the server's structlog set-up routes it to JSON lines too).
log = logging.getLogger("timerwheel.consumer")

STOP_POLL_S = 0.05  # the sync loop's look at `stop` (a threading.Event cannot be selected)
# How long a stopping consumer waits for the server to end a stream that released
# messages. It ends once the acks are in and what was on its way is released, so this
# only bounds a server that does not answer; the stream is cancelled after it.
STOP_DRAIN_S = 10.0


class Message:
    """One delivered message: the `Delivery` fields (`message_id`, `topic`, `body`,
    `properties`, `deliver_at_ms`, `fired_at_ms`, `attempt`) plus `ack()` and `nack()`.
    `delivery` is the raw `timerwheel.v1.Delivery`."""

    __slots__ = ("_settler", "delivery", "settled")

    def __init__(self, delivery: pb.Delivery, settler: Settler) -> None:
        self.delivery = delivery
        self._settler = settler
        self.settled = False  # acked or nacked (guarded by the settler's lock)

    def __getattr__(self, name: str) -> object:
        return getattr(self.delivery, name)

    def ack(self) -> bool:
        """Mark it done (sent in the next Ack batch). False if it was already settled."""
        return self._settler.settle(self, ok=True)

    def nack(self, reason: str = "") -> bool:
        """Give it back for redelivery (`reason` is kept as a dead letter's last error).
        False if it was already settled."""
        return self._settler.settle(self, ok=False, reason=reason)

    def __repr__(self) -> str:
        d = self.delivery
        return f"Message(message_id={d.message_id!r}, topic={d.topic!r}, attempt={d.attempt})"


class Settler:
    """Settles each message once (the first of ack and nack wins), into `settlements`."""

    def __init__(self, settlements: Settlements) -> None:
        self.lock = threading.Lock()  # settle() is called from many handler threads
        self.settlements = settlements

    def settle(self, message: Message, ok: bool, reason: str = "") -> bool:
        with self.lock:
            if message.settled:
                return False
            message.settled = True
        if ok:
            self.settlements.ack([message.delivery.message_id])
        else:
            self.settlements.nack([message.delivery.message_id], reason)
        return True


def _handle(handler: Callable, message: Message) -> None:
    try:
        handler(message)
    except Exception as exc:
        log_failure(message, exc)
        message.nack(failure_reason(exc))
    else:
        message.ack()


def log_failure(message: Message, exc: Exception) -> None:
    """A handler raised: a warning with the traceback for a message's first failure, a
    one-line debug record for its retries. A poison message fails on every attempt, and a
    traceback each time buries the logs; its first says what is wrong, and the dead letter
    keeps the last reason."""
    if message.delivery.attempt <= 1:
        log.warning("consume_handler_failed message_id=%s", message.message_id, exc_info=True)
    else:
        log.debug(
            "consume_handler_failed message_id=%s attempt=%d error=%s",
            message.message_id, message.delivery.attempt, failure_reason(exc),
        )  # fmt: skip


def failure_reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


class Drain:
    """What a stopping consumer's releases did: `draining` once the server took one (the
    stream then ends by itself once it holds nothing, so the consumer waits for that)."""

    def __init__(self) -> None:
        self.draining = False

    def answered(self, response: pb.NackResponse) -> None:
        if response.nacked:
            self.draining = True


def _release(client: Client, topic: str, message_ids: list[str], drain: Drain) -> None:
    """Give back messages no handler started: not failed attempts. A failure is logged,
    not raised: the messages then go back as the stream ends, as they did before."""
    for ids in in_calls(message_ids):
        try:
            drain.answered(client.nack(topic, ids, release=True))
        except RemoteError as exc:
            log.warning("consume_release_failed count=%d error=%s", len(ids), exc)


def consume(
    client: Client,
    topic: str,
    handler: Callable[[Message], object],
    *,
    concurrency: int = 1,
    max_in_flight: int = 0,
    stop: threading.Event | None = None,
    ack_linger_ms: int = DEFAULT_ACK_LINGER_MS,
) -> int:
    """See the module doc; returns how many messages the server confirmed acked."""
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}: must be >= 1")
    sender = AckSender(client, topic, ack_linger_ms)
    settler = Settler(sender.settlements)
    subscription = client.subscribe(topic, max_in_flight)
    work: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
    ending = threading.Event()
    # The reader queues a batch, or releases it once stopping, under this lock; `ending`
    # is set under it too, so each batch is either in the queue when the stop drains it
    # or released by the reader: none is left in the queue after the workers have gone.
    handing_out = threading.Lock()
    stream_ended = threading.Event()
    stream_error: list[RemoteError] = []
    drain = Drain()
    unstarted: list[Message] = []  # taken by a worker after the stop: released after

    def read() -> None:
        try:
            for batch in subscription:
                with handing_out:
                    if not stopping():
                        for delivery in batch:
                            work.put(Message(delivery, settler))
                        continue
                _release(client, topic, [d.message_id for d in batch], drain)
        except RemoteError as exc:
            stream_error.append(exc)
        finally:
            stream_ended.set()

    def stopping() -> bool:
        return ending.is_set() or (stop is not None and stop.is_set())

    def work_loop() -> None:
        while (message := work.get()) is not None:
            if stopping():
                unstarted.append(message)
            else:
                _handle(handler, message)

    threads = [threading.Thread(target=read, name="timerwheel-consume-read", daemon=True)]
    threads += [
        threading.Thread(target=work_loop, name=f"timerwheel-consume-{i}", daemon=True)
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    try:
        while not stream_ended.wait(STOP_POLL_S if stop is not None else None):
            if stop is not None and stop.is_set():
                break
    finally:
        with handing_out:
            ending.set()
            queued = _drain_queue(work)
        _release(client, topic, [m.delivery.message_id for m in queued], drain)
        for _ in range(concurrency):
            work.put(None)
        for thread in threads[1:]:
            thread.join()  # handlers in progress finish and settle
        _release(client, topic, [m.delivery.message_id for m in unstarted], drain)
        sender.close()  # their acks are sent before the stream ends
        if drain.draining and sender.error is None:
            stream_ended.wait(STOP_DRAIN_S)  # the server ends it once it holds nothing
        subscription.cancel()
        threads[0].join()
    if stream_error:
        raise stream_error[0]
    if sender.error is not None:
        raise sender.error
    return sender.acked


def _drain_queue(work: queue.SimpleQueue[Message | None]) -> list[Message]:
    """The messages waiting in `work` now, taken out."""
    messages = []
    with contextlib.suppress(queue.Empty):
        while (message := work.get_nowait()) is not None:
            messages.append(message)
    return messages
