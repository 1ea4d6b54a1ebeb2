"""Batching producers: one message per `send()`, many messages per SendBatch RPC.

Like Kafka's and Pulsar's producers: callers on many threads (or asyncio tasks) each send
one message and get a future; the producer packs what arrives close together into one
SendBatch (one RPC, one group commit on the server) and completes each future with that
message's `SendResult`.

    with client.producer(linger_ms=2, max_batch=500) as producer:   # threads
        future = producer.send("orders", b"pay #42", delay_ms="90s")
        future.result().message_id

    async with async_client.producer() as producer:                  # asyncio tasks
        result = await producer.send("orders", b"pay #42", delay_ms="90s")

(`AsyncProducer` is in timerwheel/aio_producer.py.)

When a batch goes out: as soon as `max_batch` messages are waiting, or `linger_ms` after
the oldest waiting message arrived, whichever is first. At most `max_in_flight` batches
are on the wire at once; while they are, new sends wait and form the next, bigger batch
(so under load batches grow by themselves and linger costs nothing).

Errors map to the message that caused them. SendBatch is atomic (all stored or none), so
when the server refuses a batch for one message's sake (INVALID_ARGUMENT, ALREADY_EXISTS,
FAILED_PRECONDITION, PERMISSION_DENIED), nothing was stored and each message of that batch
is sent again on its own: the good ones succeed, the bad one's future gets its own error.
A batch refused while the server's fires run late (RESOURCE_EXHAUSTED saying nothing was
stored: timerwheel/retries.py) is sent again as it was after the wait the server asks for,
doubling while refused, keeping its slot on the wire, until `timeout_s` of the client
runs out. Any other refusal of the whole call (UNAVAILABLE, RESOURCE_EXHAUSTED,
DEADLINE_EXCEEDED, ...), and that one past the deadline, is set on every future of the
batch as a `RemoteError`; such a send may or may not have been stored (at least once:
retry it with the same message_id to be sure). A bad argument
(`delay_ms="soon"`) raises ValueError from `send()` itself.

Against a cluster (a client with `routing`, timerwheel/routing.py), a batch is sent as
one SendBatch per partition owner its ids belong to, each to that owner, at once (ids
the server makes go to the client's target): each part is atomic on its owner and its
futures settle from its own answer, as above. The parts are not marked direct: where
the client's map is stale, the node a part reaches forwards it, one hop more and the
same answer, rather than failing it; the map is read again when a routed call of the
client is answered "not owner".

`flush()` sends what is waiting without lingering and waits until every send made before
it is answered. `close()` (and leaving the `with` block) stops taking sends (`send()` then
raises RuntimeError), sends everything still waiting and waits for all the answers. A
future cancelled before its batch goes out is dropped from the batch.
"""

from __future__ import annotations

import concurrent.futures
import functools
import threading
import time
from typing import TYPE_CHECKING

import grpc

from timerwheel.common import SendResult
from timerwheel.retries import Retrying
from timerwheel.split_send import owner_parts
from timerwheel.types import RemoteError, send_request, send_result
from timerwheel.v1 import timerwheel_pb2 as pb

if TYPE_CHECKING:
    from timerwheel.client import Client
    from timerwheel.routing import RouteTable

# A batch refused with one of these was refused for some message's sake; nothing is stored.
PER_MESSAGE_CODES = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.PERMISSION_DENIED,
    }
)


def by_owner(router: RouteTable | None, batch: list) -> list[tuple[object, list]]:
    """A batch's `(request, future)` items as `[(stub or None, part)]`, one part per
    owner address the client's map names (None: the client's target; every message when
    the client does not route or has no cluster map)."""
    if router is None:
        return [(None, batch)]
    groups = owner_parts(router, [request for request, _ in batch], list(range(len(batch))))
    return [(router.stub_at(address), [batch[i] for i in ix]) for address, ix in groups.items()]


def check_options(linger_ms: int, max_batch: int, max_in_flight: int) -> None:
    if linger_ms < 0:
        raise ValueError(f"linger_ms={linger_ms}: must be >= 0")
    if max_batch < 1:
        raise ValueError(f"max_batch={max_batch}: must be >= 1")
    if max_in_flight < 1:
        raise ValueError(f"max_in_flight={max_in_flight}: must be >= 1")


class Producer:
    """The thread-safe batching producer of a `timerwheel.Client` (see the module doc)."""

    def __init__(
        self, client: Client, *, linger_ms: int = 2, max_batch: int = 500, max_in_flight: int = 4
    ) -> None:
        check_options(linger_ms, max_batch, max_in_flight)
        self._client = client
        self._linger_s = linger_ms / 1000
        self._max_batch = max_batch
        self._slots = threading.BoundedSemaphore(max_in_flight)
        self._cond = threading.Condition()
        self._waiting: list[tuple[pb.SendRequest, concurrent.futures.Future]] = []
        self._oldest_at = 0.0  # monotonic arrival of the oldest waiting send
        self._unanswered: set[concurrent.futures.Future] = set()
        self._hurry = False  # flush() or close(): send without lingering
        self._closed = False
        self.batches_sent = 0  # SendBatch calls made (not counting single retries)
        self._thread = threading.Thread(target=self._run, name="timerwheel-producer", daemon=True)
        self._thread.start()

    def send(
        self, topic: str, body: bytes | str = b"", **when_and_more: object
    ) -> concurrent.futures.Future[SendResult]:
        """Queue one message (arguments as `Client.send`); the future gets its SendResult."""
        request = send_request(topic, body, **when_and_more)
        future: concurrent.futures.Future[SendResult] = concurrent.futures.Future()
        with self._cond:
            if self._closed:
                raise RuntimeError("the producer is closed")
            if not self._waiting:
                self._oldest_at = time.monotonic()
                self._cond.notify()
            self._waiting.append((request, future))
            self._unanswered.add(future)
            if len(self._waiting) == self._max_batch:
                self._cond.notify()
        future.add_done_callback(self._answered)
        return future

    def flush(self, timeout_s: float | None = None) -> bool:
        """Send what waits now; True once every earlier send is answered (False: timed out)."""
        with self._cond:
            pending = list(self._unanswered)
            self._hurry = True
            self._cond.notify()
        _, not_done = concurrent.futures.wait(pending, timeout=timeout_s)
        return not not_done

    def close(self, timeout_s: float | None = None) -> bool:
        """Stop taking sends, send what waits, wait for every answer (False: timed out)."""
        with self._cond:
            self._closed = True
            self._cond.notify()
        self._thread.join(timeout_s)
        return self.flush(timeout_s)

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the sender thread ----------------------------------------------------------------
    def _answered(self, future: concurrent.futures.Future) -> None:
        with self._cond:
            self._unanswered.discard(future)

    def _run(self) -> None:
        while True:
            self._slots.acquire()  # wait for room on the wire before choosing the batch
            batch = self._next_batch()
            if batch is None:
                self._slots.release()
                return
            if not batch:  # every future of it was cancelled
                self._slots.release()
                continue
            router = self._client.router
            if router is not None:  # the cluster's map, read once (a single node: no map)
                router.owner_stub(next((r.message_id for r, _ in batch if r.message_id), ""))
            parts = by_owner(router, batch)
            self.batches_sent += len(parts)
            answered = _Countdown(len(parts), self._slots.release)
            for stub, part in parts:
                service = stub or self._client.service
                settle = functools.partial(self._settle, part, service=service, answered=answered)
                call = pb.SendBatchRequest(messages=[request for request, _ in part])
                send_retrying(service.SendBatch, call, self._client.timeout_s, settle)

    def _next_batch(self) -> list[tuple[pb.SendRequest, concurrent.futures.Future]] | None:
        """Wait for a full batch, the linger to pass, or a hurry; None once closed and empty."""
        with self._cond:
            while True:
                if self._waiting:
                    full = len(self._waiting) >= self._max_batch
                    left_s = self._oldest_at + self._linger_s - time.monotonic()
                    if full or self._hurry or self._closed or left_s <= 0:
                        break
                    self._cond.wait(left_s)
                elif self._closed:
                    return None
                else:
                    self._hurry = False
                    self._cond.wait()
            batch = self._waiting[: self._max_batch]
            del self._waiting[: self._max_batch]
            self._oldest_at = 0.0  # the rest waited already: they go out next, no linger
        return [item for item in batch if item[1].set_running_or_notify_cancel()]

    def _settle(self, batch: list, call: grpc.Future, service, answered: _Countdown) -> None:
        try:
            response = call.result()
        except grpc.RpcError as error:
            if error.code() in PER_MESSAGE_CODES and len(batch) > 1:
                for request, future in batch:
                    _send_alone(self._client, service, request, future)
            else:
                failure = RemoteError.of(error)
                for _, future in batch:
                    future.set_exception(failure)
        else:
            for (_, future), result in zip(batch, response.results, strict=True):
                future.set_result(send_result(result))
        finally:
            answered()


class _Countdown:
    """Calls `then` once it has been called `count` times (a batch's parts answered)."""

    def __init__(self, count: int, then) -> None:
        self._left = count
        self._then = then
        self._lock = threading.Lock()

    def __call__(self) -> None:
        with self._lock:
            self._left -= 1
            last = self._left == 0
        if last:
            self._then()


def _send_alone(client: Client, service, request: pb.SendRequest, future) -> None:
    """One message of a refused batch on its own: its future gets its own answer."""

    def done(call: grpc.Future) -> None:
        try:
            future.set_result(send_result(call.result()))
        except grpc.RpcError as error:
            future.set_exception(RemoteError.of(error))

    send_retrying(service.Send, request, client.timeout_s, done)


def send_retrying(
    method, request, timeout_s: float | None, done, retrying: Retrying | None = None
) -> None:
    """`method.future(request)`, made again after each refusal that stored nothing (on a
    timer thread, after the wait it asks for: timerwheel/retries.py) while the call's
    deadline allows; then `done(call)` with the last call. The batch keeps its slot on
    the wire meanwhile, so a refused producer sends no more than its window."""
    if retrying is None:
        retrying = Retrying(time.monotonic(), timeout_s, unavailable=False)
    call = method.future(request, timeout=retrying.left_s(time.monotonic()))

    def settle(call: grpc.Future) -> None:
        error = call.exception()
        wait = None if error is None else retrying.after(error, time.monotonic())
        if wait is None:
            done(call)
            return
        again = threading.Timer(wait, send_retrying, (method, request, timeout_s, done, retrying))
        again.daemon = True
        again.start()

    call.add_done_callback(settle)
