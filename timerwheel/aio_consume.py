"""`consume_async()`: `timerwheel.consumer.consume` for `timerwheel.AsyncClient`.

The same loop on asyncio: `concurrency` tasks instead of threads (an async handler is
awaited), the same settlement in batches (timerwheel/acks.py) and the same clean stop,
releasing what no handler started (timerwheel/consumer.py says what each step is for).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING

from timerwheel.acks import (
    DEFAULT_ACK_LINGER_MS,
    MAX_ACK_CALLS_ON_WIRE,
    Settlements,
    check_linger_ms,
    gate_wait_s,
    in_calls,
)
from timerwheel.consumer import (
    STOP_DRAIN_S,
    Drain,
    Message,
    Settler,
    failure_reason,
    log,
    log_failure,
)
from timerwheel.types import RemoteError

if TYPE_CHECKING:
    from timerwheel.aio import AsyncClient


async def release_async(
    client: AsyncClient, topic: str, message_ids: list[str], drain: Drain
) -> None:
    """`timerwheel.consumer._release` on the event loop: Nack with `release`, per batch."""
    for ids in in_calls(message_ids):
        try:
            drain.answered(await client.nack(topic, ids, release=True))
        except RemoteError as exc:
            log.warning("consume_release_failed count=%d error=%s", len(ids), exc)


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
    settler = Settler(settlements)
    subscription = client.subscribe(topic, max_in_flight)
    work: asyncio.Queue[Message | None] = asyncio.Queue()
    ending = asyncio.Event()  # hand out no more messages
    handled = asyncio.Event()  # every handler has finished: the last settlements are in
    drain = Drain()
    unstarted: list[Message] = []  # taken by a task after the stop: released after

    def stopping() -> bool:
        return ending.is_set() or (stop is not None and stop.is_set())

    async def read() -> None:
        async for batch in subscription:
            if stopping():  # one thread: nothing is queued after the stop has drained it
                await release_async(client, topic, [d.message_id for d in batch], drain)
                continue
            for delivery in batch:
                work.put_nowait(Message(delivery, settler))

    async def work_loop() -> None:
        while (message := await work.get()) is not None:
            if stopping():
                unstarted.append(message)
                continue
            try:
                result = handler(message)
                if inspect.isawaitable(result):
                    await result
            except Exception as exc:
                log_failure(message, exc)
                message.nack(failure_reason(exc))
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
        queued = []
        while not work.empty():
            if (message := work.get_nowait()) is not None:
                queued.append(message)
        await release_async(client, topic, [m.delivery.message_id for m in queued], drain)
        for _ in workers:
            work.put_nowait(None)
        await asyncio.gather(*workers)
        await release_async(client, topic, [m.delivery.message_id for m in unstarted], drain)
        handled.set()
        arrived.set()
        ack_result = (await asyncio.gather(sender, return_exceptions=True))[0]
        if drain.draining and not isinstance(ack_result, BaseException):
            await asyncio.wait({reader}, timeout=STOP_DRAIN_S)  # the server ends it
        subscription.cancel()
        stream_error = (await asyncio.gather(reader, return_exceptions=True))[0]
        for waiter in waits - {reader}:
            waiter.cancel()
    for error in (stream_error, ack_result):
        if isinstance(error, BaseException):
            raise error
    return ack_result
