"""`consume()`: a consumer loop that acks what its handler finished and nacks what failed.

    def handle(message):                      # a Message: .body, .attempt, .ack(), .nack()
        process(message.body)                 # raise: nacked; return: acked

    stop = threading.Event()
    client.consume("orders", handle, concurrency=8, stop=stop)   # until stop.set()
    await async_client.consume("orders", async_handle, concurrency=8, stop=asyncio_event)

The handler is called once per message, on one of `concurrency` threads (tasks for the
async client; an async handler is awaited). When it returns, the message is acked; when
it raises, it is nacked (delivered again, `attempt` + 1) and the error is logged. A
handler may settle a message itself first with `message.ack()` or `message.nack()`; the
first settlement wins. Acks and nacks are sent in batches by one sender, so a fast
handler does not cost an RPC per message: gathering for `ack_linger_ms` (default 10) once
something waits, and another call on the wire only once the last has been out a whole
linger (timerwheel/acks.py says why). With
`concurrency=1` messages are handled in delivery order.

Stopping: `consume` returns when `stop` is set (also while the topic is idle: the sync
loop looks at `stop` every 50 ms) or when the server ends the stream. It then hands out
no more messages, lets handlers in progress finish, sends their acks, and only then ends
the Subscribe stream; messages received but not yet handled go back to the server and are
delivered again at once (their attempt count goes up). It returns how many messages the
server confirmed acked. A broken stream or a failed Ack raises `RemoteError` after the
same clean-up.

A nack is the Nack RPC: a failed attempt, delivered again at once (`attempt` + 1), or
moved to the dead-letter topic once the message has used its `max_attempts`.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING

from timerwheel.acks import (
    DEFAULT_ACK_LINGER_MS,
    MAX_ACK_CALLS_ON_WIRE,
    AckSender,
    Settlements,
    check_linger_ms,
    gate_wait_s,
    in_calls,
)
from timerwheel.types import RemoteError
from timerwheel.v1 import timerwheel_pb2 as pb

if TYPE_CHECKING:
    from timerwheel.aio import AsyncClient
    from timerwheel.client import Client

# The standard library's logging, as a client library should use: the application
# configures it (the server's structlog set-up routes it to JSON lines too).
log = logging.getLogger("timerwheel.consumer")

STOP_POLL_S = 0.05  # the sync loop's look at `stop` (a threading.Event cannot be selected)


class Message:
    """One delivered message: the `Delivery` fields (`message_id`, `topic`, `body`,
    `properties`, `deliver_at_ms`, `fired_at_ms`, `attempt`) plus `ack()` and `nack()`.
    `delivery` is the raw `timerwheel.v1.Delivery`."""

    __slots__ = ("_settler", "delivery", "settled")

    def __init__(self, delivery: pb.Delivery, settler: _Settler) -> None:
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


class _Settler:
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
        log.warning("consume_handler_failed message_id=%s", message.message_id, exc_info=True)
        message.nack(_reason(exc))
    else:
        message.ack()


def _reason(exc: Exception) -> str:
    return f"{type(exc).__name__}: {exc}"[:500]


# == threads (timerwheel.Client) ===========================================================
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
    settler = _Settler(sender.settlements)
    subscription = client.subscribe(topic, max_in_flight)
    work: queue.SimpleQueue[Message | None] = queue.SimpleQueue()
    ending = threading.Event()
    stream_ended = threading.Event()
    stream_error: list[RemoteError] = []

    def read() -> None:
        try:
            for batch in subscription:
                for delivery in batch:
                    work.put(Message(delivery, settler))
        except RemoteError as exc:
            stream_error.append(exc)
        finally:
            stream_ended.set()

    def stopping() -> bool:
        return ending.is_set() or (stop is not None and stop.is_set())

    def work_loop() -> None:
        while (message := work.get()) is not None:
            if not stopping():  # stopping: unhandled ones go back with the stream
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
        ending.set()
        for _ in range(concurrency):
            work.put(None)
        for thread in threads[1:]:
            thread.join()  # handlers in progress finish and settle
        sender.close()  # their acks are sent before the stream ends
        subscription.cancel()
        threads[0].join()
    if stream_error:
        raise stream_error[0]
    if sender.error is not None:
        raise sender.error
    return sender.acked


# == asyncio (timerwheel.AsyncClient) ======================================================
async def consume_async(
    client: AsyncClient,
    topic: str,
    handler: Callable[[Message], object],
    *,
    concurrency: int = 1,
    max_in_flight: int = 0,
    stop: asyncio.Event | None = None,
    ack_linger_ms: int = DEFAULT_ACK_LINGER_MS,
) -> int:
    """`consume` for asyncio: `concurrency` tasks; an async handler is awaited."""
    if concurrency < 1:
        raise ValueError(f"concurrency={concurrency}: must be >= 1")
    linger_s = check_linger_ms(ack_linger_ms) / 1000
    settlements = Settlements()
    arrived = asyncio.Event()
    settlements.wake = arrived.set  # called on the loop's thread: handlers run as tasks
    settler = _Settler(settlements)
    subscription = client.subscribe(topic, max_in_flight)
    work: asyncio.Queue[Message | None] = asyncio.Queue()
    ending = asyncio.Event()  # hand out no more messages
    handled = asyncio.Event()  # every handler has finished: the last settlements are in

    async def read() -> None:
        async for batch in subscription:
            for delivery in batch:
                work.put_nowait(Message(delivery, settler))

    async def work_loop() -> None:
        while (message := await work.get()) is not None:
            if ending.is_set() or (stop is not None and stop.is_set()):
                continue
            try:
                result = handler(message)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                log.warning(
                    "consume_handler_failed message_id=%s", message.message_id, exc_info=True
                )
                message.nack(_reason(exc))
            else:
                message.ack()

    async def send_settled() -> int:
        """Settlements in batches as timerwheel.acks.AckSender sends them (the linger,
        the gate, up to MAX_ACK_CALLS_ON_WIRE batches on the wire); returns acked."""
        loop = asyncio.get_running_loop()
        calls: set[asyncio.Task[int]] = set()
        newest: asyncio.Task[int] | None = None
        newest_sent_at = 0.0  # loop.time() when the newest call went
        acked, errors = 0, []

        def gate_wait() -> float | None:
            out_s = None if newest is None or newest.done() else loop.time() - newest_sent_at
            return gate_wait_s(len(calls), out_s, linger_s, MAX_ACK_CALLS_ON_WIRE)

        def returned(task: asyncio.Task[int]) -> None:
            nonlocal acked
            calls.discard(task)
            if task.cancelled():
                return
            if task.exception() is not None:
                errors.append(task.exception())
            else:
                acked += task.result()

        async def send(acks: list[str], nacks: dict[str, list[str]]) -> int:
            sent = sum([await client.ack(topic, ids) for ids in in_calls(acks)])
            for reason, message_ids in nacks.items():
                await client.nack(topic, message_ids, reason)
            return sent

        while True:
            await arrived.wait()
            while not handled.is_set() and (wait_s := gate_wait()) != 0.0:
                await asyncio.wait(calls, timeout=wait_s, return_when=asyncio.FIRST_COMPLETED)
            if linger_s and not handled.is_set():  # gather more; the end cuts it short
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(handled.wait(), linger_s)
            arrived.clear()
            acks, nacks = settlements.take()
            if acks or nacks:
                newest, newest_sent_at = asyncio.create_task(send(acks, nacks)), loop.time()
                newest.add_done_callback(returned)
                calls.add(newest)
            if handled.is_set() and not settlements.waiting:
                await asyncio.gather(*calls, return_exceptions=True)  # every call answered
                if errors:
                    raise errors[0]
                return acked

    reader = asyncio.create_task(read())
    workers = [asyncio.create_task(work_loop()) for _ in range(concurrency)]
    sender = asyncio.create_task(send_settled())
    waits = {reader} if stop is None else {reader, asyncio.create_task(stop.wait())}
    try:
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    finally:
        ending.set()
        for _ in workers:
            work.put_nowait(None)
        await asyncio.gather(*workers)
        handled.set()
        arrived.set()
        ack_result = (await asyncio.gather(sender, return_exceptions=True))[0]
        subscription.cancel()
        stream_error = (await asyncio.gather(reader, return_exceptions=True))[0]
        for waiter in waits - {reader}:
            waiter.cancel()
    for error in (stream_error, ack_result):
        if isinstance(error, BaseException):
            raise error
    return ack_result
