"""The batching producer of `timerwheel.AsyncClient`, for asyncio tasks: the asyncio twin
of `timerwheel.producer.Producer`, with the same semantics (timerwheel/producer.py's
module doc: batching, lingering, errors mapped to their messages, a cluster's parts, the
refusals that stored nothing sent again).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING

import grpc

from timerwheel.producer import PER_MESSAGE_CODES, by_owner, check_options
from timerwheel.retries import call_retrying_async
from timerwheel.types import RemoteError, send_request, send_result
from timerwheel.v1 import timerwheel_pb2 as pb

if TYPE_CHECKING:
    from timerwheel.aio import AsyncClient


class AsyncProducer:
    """The batching producer of a `timerwheel.AsyncClient`, for asyncio tasks.

    `send()` is a plain method returning an asyncio future (`await producer.send(...)`);
    create and use it inside the running event loop. Semantics as `Producer`.
    """

    def __init__(
        self,
        client: AsyncClient,
        *,
        linger_ms: int = 2,
        max_batch: int = 500,
        max_in_flight: int = 4,
    ) -> None:
        check_options(linger_ms, max_batch, max_in_flight)
        self._client = client
        self._linger_s = linger_ms / 1000
        self._max_batch = max_batch
        self._slots = asyncio.Semaphore(max_in_flight)
        self._waiting: list[tuple[pb.SendRequest, asyncio.Future]] = []
        self._arrived = asyncio.Event()
        self._hurry = asyncio.Event()  # a full batch, flush() or close(): stop lingering
        self._oldest_at = 0.0  # loop time of the oldest waiting send
        self._unanswered: set[asyncio.Future] = set()
        self._closed = False
        self._tasks: set[asyncio.Task] = set()
        self.batches_sent = 0
        self._loop = asyncio.get_running_loop()
        self._sender = self._loop.create_task(self._run())

    def send(self, topic: str, body: bytes | str = b"", **when_and_more: object) -> asyncio.Future:
        """Queue one message (arguments as `Client.send`); await the future for its result."""
        if self._closed:
            raise RuntimeError("the producer is closed")
        request = send_request(topic, body, **when_and_more)
        future = self._loop.create_future()
        if not self._waiting:
            self._oldest_at = self._loop.time()
        self._waiting.append((request, future))
        self._unanswered.add(future)
        future.add_done_callback(self._unanswered.discard)
        self._arrived.set()
        if len(self._waiting) >= self._max_batch:
            self._hurry.set()
        return future

    async def flush(self) -> None:
        """Send what waits now and wait until every earlier send is answered."""
        pending = list(self._unanswered)
        if self._waiting:
            self._hurry.set()
        await asyncio.gather(*pending, return_exceptions=True)

    async def close(self) -> None:
        """Stop taking sends, send what waits, wait for every answer."""
        self._closed = True
        self._arrived.set()
        self._hurry.set()
        await self._sender
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def __aenter__(self) -> AsyncProducer:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _run(self) -> None:
        while True:
            await self._slots.acquire()  # wait for room on the wire before choosing the batch
            while not self._waiting and not self._closed:
                self._arrived.clear()
                await self._arrived.wait()
            if not self._waiting:  # closed, and everything went out
                self._slots.release()
                return
            left_s = self._oldest_at + self._linger_s - self._loop.time()
            if left_s > 0 and not self._closed:
                # linger: a full batch (or flush/close) ends the wait early
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._hurry.wait(), left_s)
            batch = [item for item in self._waiting[: self._max_batch] if not item[1].done()]
            del self._waiting[: self._max_batch]
            self._oldest_at = 0.0  # the rest waited already: they go out next, no linger
            if not self._waiting:
                self._hurry.clear()
            if not batch:  # every future of it was cancelled
                self._slots.release()
                continue
            task = self._loop.create_task(self._send(batch))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _send(self, batch: list[tuple[pb.SendRequest, asyncio.Future]]) -> None:
        """The batch as one SendBatch per owner (one, unless routed), at once."""
        try:
            router = self._client.router
            if router is not None:  # the cluster's map, read once (a single node: no map)
                await router.owner_stub(next((r.message_id for r, _ in batch if r.message_id), ""))
            parts = by_owner(router, batch)
            self.batches_sent += len(parts)
            await asyncio.gather(
                *(self._send_part(stub or self._client.service, part) for stub, part in parts)
            )
        finally:
            self._slots.release()

    async def _send_part(self, service, batch: list[tuple[pb.SendRequest, asyncio.Future]]):
        try:
            request = pb.SendBatchRequest(messages=[request for request, _ in batch])
            response = await call_retrying_async(
                service.SendBatch, request, self._client.timeout_s, unavailable=False
            )  # a batch refused without anything stored is sent again (retries.py)
        except grpc.RpcError as error:
            if error.code() in PER_MESSAGE_CODES and len(batch) > 1:
                await asyncio.gather(*(self._send_alone(service, r, f) for r, f in batch))
            else:
                for _, future in batch:
                    _resolve(future, exception=RemoteError.of(error))
        else:
            for (_, future), result in zip(batch, response.results, strict=True):
                _resolve(future, result=send_result(result))

    async def _send_alone(self, service, request: pb.SendRequest, future: asyncio.Future) -> None:
        try:
            timeout_s = self._client.timeout_s
            response = await call_retrying_async(
                service.Send, request, timeout_s, unavailable=False
            )
        except grpc.RpcError as error:
            _resolve(future, exception=RemoteError.of(error))
        else:
            _resolve(future, result=send_result(response))


def _resolve(future: asyncio.Future, *, result: object = None, exception=None) -> None:
    if future.done():  # cancelled by its caller meanwhile
        return
    if exception is not None:
        future.set_exception(exception)
    else:
        future.set_result(result)
