"""A thread pool that shares its threads fairly between callers: the unary and settle pools.

The synchronous gRPC server runs each call on a thread of a pool, and a call holds its
thread for as long as it waits: for a place of the receive gate while other requests are
read, for its group commit, for a read. grpcio's pool queues calls first come, first
served, so one caller with many slow calls (dozens of 15 MiB SendBatch calls, most of
them waiting for the receive gate) held every thread, and every other token's calls
waited behind all of them in the queue: seconds for a Send that takes milliseconds.

Here each caller has a queue of its own, and an idle thread takes the next call from the
callers with work in turn (round robin), so another caller's call waits for one thread to
come free, never behind a whole queue. And a caller runs at most `per_key` calls at once:
its other calls wait in its queue, holding no thread, so `workers - per_key` threads are
always left to the other callers. A caller alone gets `per_key` threads (the
`caller_thread_share_percent` of the pool), and a load test from one connection is slowed,
not refused, if it needs more threads than that at once (up to the cap below).

Who a call counts against (`call_key`): its token's name, which the request guard puts in
the call's context before grpcio hands the call to the pool
(timerwheel.security.limits `set_caller`); without tokens, its connection (grpcio's peer
string with the port). Without a token file the server has no tenants (any caller may do
anything, Purge included), so that share keeps one busy connection (a bulk import, a
load test's producer) from holding every thread while another connection's calls wait;
it is not a defence. An address would make every local process one caller on a loopback
server (load tests open many connections from 127.0.0.1), whose calls would then never
run on the threads kept for others; a connection costs an attacker nothing, but one
without tokens could Purge anyway.

What a caller may have waiting is capped (`max_queued`, the security setting
`max_queued_calls_per_caller`): a call that finds its caller with `per_key + max_queued`
calls in the pool (running and waiting) is refused at once, RESOURCE_EXHAUSTED naming the
setting and the caller's counts, on the thread that submits it (grpcio's poller, as
grpcio refuses its own `maximum_concurrent_rpcs`): the call never reads its request nor
waits for a thread. Without the cap, one token's flood of waiting calls filled grpcio's
`max_concurrent_rpcs`, past which grpcio refuses every caller's call.

What all callers together may have in the pool is bounded too (`capacity`), and shared
max-min: a call that finds the pool full takes the place of the newest waiting call of
the caller holding the most calls (running and waiting), if that caller holds more than
the newcomer's would with it; else the newcomer is refused. The call that gives way is
answered RESOURCE_EXHAUSTED at once, as a capped one is. A call is thus refused only
when no caller with calls waiting holds more than its caller would: with `capacity -
workers` calls or more waiting among n callers, a caller holding fewer than
(capacity - workers) / n - 1 calls is always admitted, however the others flood.
grpcio's own `maximum_concurrent_rpcs` refuses every caller alike once reached; the
server's pools have capacities that add up to less (timerwheel.wheels.call_room), so it
never is.

A call whose behaviour is marked `at_once` (the request guard's refusals, which neither
read the request nor wait for anything) is answered on the thread that submits it,
grpcio's poller: it takes no thread and no place in any bound.

It passes for a `concurrent.futures.ThreadPoolExecutor` (grpcio takes the server's pool,
and a behaviour's `experimental_thread_pool` only when it is one) but schedules its own
threads: `submit`, `shutdown` and nothing else.
"""

from __future__ import annotations

import contextvars
import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import grpc

from timerwheel.observability import metrics
from timerwheel.security.access import rpc_name, short_name
from timerwheel.security.limits import caller_of_context
from timerwheel.wheels.domain import Overloaded

UNKNOWN_CALLER = "unknown"  # a task that is no gRPC call (none in the server): one queue


def call_key(fn: Callable[..., Any], args: tuple[Any, ...]) -> str:
    """The caller a submitted gRPC call counts against. grpcio submits a call as
    `submit(call_context.run, handler, rpc_event, ...)`: the token's name is in that
    context (set by the guard); else the connection is the rpc_event's call's peer."""
    context = getattr(fn, "__self__", None)
    if isinstance(context, contextvars.Context):
        caller = caller_of_context(context)
        if caller is not None:
            return caller
    for arg in args[:3]:
        peer = getattr(getattr(arg, "call", None), "peer", None)
        if callable(peer):
            try:
                got = peer()
            except Exception:  # a call already gone: count it with the unknown ones
                break
            return "peer " + (got.decode(errors="replace") if isinstance(got, bytes) else got)
    return UNKNOWN_CALLER


class _Unread:
    """What a refused call gets instead of its request, which is never read."""


def answers_at_once(args: tuple[Any, ...]) -> bool:
    """Whether a submitted gRPC call's behaviour (`args[3]`, as `refuse_call` unpacks
    them) is one that answers without waiting: run where it is submitted."""
    return len(args) == 7 and getattr(args[3], "at_once", False) is True


def refuse_call(fn: Callable[..., Any], args: tuple[Any, ...], reason: str) -> bool:
    """Answer a call grpcio submitted (`submit(call_context.run, <grpcio's in-pool
    function>, rpc_event, state, behaviour, argument_thunk, deserializer, serializer)`)
    with RESOURCE_EXHAUSTED `reason`, here and now: grpcio's own function runs with a
    behaviour that aborts, and an argument that reads nothing. False when `fn, args` is
    not such a call (the caller fails the future instead)."""
    if not isinstance(getattr(fn, "__self__", None), contextvars.Context) or len(args) != 7:
        return False
    in_pool, rpc_event, state, _behaviour, _thunk, deserializer, serializer = args
    method = _method_of(rpc_event)
    name = short_name(method)

    def refuse(_request: object, context: Any) -> None:
        metrics.recorder().refused(rpc_name(method), "RESOURCE_EXHAUSTED")
        context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"{name}: {reason}")

    fn(in_pool, rpc_event, state, refuse, _Unread, deserializer, serializer)
    return True


def _method_of(rpc_event: Any) -> str:
    """The call's method: in its details, or (a method registered with grpcio, whose
    details leave it out) the event's tag."""
    for method in (getattr(getattr(rpc_event, "call_details", None), "method", b""),
                   getattr(rpc_event, "tag", b"")):  # fmt: skip
        if isinstance(method, bytes):
            method = method.decode(errors="replace")
        if isinstance(method, str) and method.startswith("/"):
            return method
    return "/unknown/method"


class FairPool(ThreadPoolExecutor):
    """`workers` threads, taken by callers in turn, at most `per_key` by one caller; at
    most `per_key + max_queued` calls of one caller in the pool (None: no cap), and
    `capacity` of all callers (None: no bound), shared max-min. `bound` says in a
    refusal where the capacity comes from."""

    def __init__(
        self, workers: int, per_key: int, thread_name_prefix: str,
        key_of: Callable[[Callable[..., Any], tuple[Any, ...]], str] = call_key,
        max_queued: int | None = None,
        refuse: Callable[[Callable[..., Any], tuple[Any, ...], str], bool] = refuse_call,
        capacity: int | None = None, bound: str = "",
    ) -> None:  # fmt: skip
        # ThreadPoolExecutor.__init__ is not called: none of its machinery is used.
        if not 1 <= per_key <= workers:
            raise ValueError(f"per_key={per_key}: must be 1..workers ({workers})")
        if max_queued is not None and max_queued < 1:
            raise ValueError(f"max_queued={max_queued}: must be 1 or more")
        if capacity is not None and capacity < workers:
            raise ValueError(f"capacity={capacity}: must be at least workers ({workers})")
        self.workers = workers
        self.capacity = capacity
        self._bound = f", {bound}" if bound else ""
        self._total = 0  # calls in the pool: running and waiting
        self.per_key = per_key
        self.max_queued = max_queued
        self._refuse = refuse
        self._name = thread_name_prefix
        self._key_of = key_of
        self._cond = threading.Condition()
        self._queues: dict[str, deque[tuple[Future[Any], Callable[..., Any], tuple, dict]]] = {}
        self._ready: deque[str] = deque()  # callers with queued calls and a thread to spare
        self._in_ready: set[str] = set()
        self._running: dict[str, int] = {}
        self._threads: list[threading.Thread] = []
        self._shutdown = False

    def running(self, key: str) -> int:
        """Calls of `key` running now (on a thread)."""
        with self._cond:
            return self._running.get(key, 0)

    def queued(self, key: str) -> int:
        """Calls of `key` waiting for a thread."""
        with self._cond:
            return len(self._queues.get(key, ()))

    def held(self, key: str) -> int:
        """Calls of `key` in the pool, running and waiting."""
        with self._cond:
            return self._held(key)

    @property
    def total(self) -> int:
        """Calls of all callers in the pool, running and waiting."""
        with self._cond:
            return self._total

    def submit(self, fn, /, *args, **kwargs):  # type: ignore[override]
        future: Future[Any] = Future()
        if answers_at_once(args):  # a refusal: it waits for nothing, so it takes no place
            future.set_running_or_notify_cancel()
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as exc:
                future.set_exception(exc)
            return future
        key = self._key_of(fn, args)
        evicted = None
        with self._cond:
            if self._shutdown:
                raise RuntimeError("cannot schedule new futures after shutdown")
            reason = self._over_cap(key)
            if reason is None and self.capacity is not None and self._total >= self.capacity:
                evicted, reason = self._make_room(key)
            if reason is None:
                self._queue(key, future, fn, args, kwargs)
        # Outside the lock: answering a call takes grpcio's locks.
        if evicted is not None:
            self._answer(*evicted)
        if reason is not None:
            self._answer(future, fn, args, reason)
        return future

    def _answer(self, future: Future[Any], fn, args, reason: str) -> None:
        """A call that will not run, refused with `reason` (RESOURCE_EXHAUSTED)."""
        if not future.set_running_or_notify_cancel():
            return
        try:
            if self._refuse(fn, args, reason):
                future.set_result(None)
            else:
                future.set_exception(Overloaded(reason))
        except BaseException as exc:  # the call is answered by grpcio's own path anyway
            future.set_exception(exc)

    def _held(self, key: str) -> int:
        return self._running.get(key, 0) + len(self._queues.get(key, ()))

    def _make_room(self, key: str):
        """The pool is at its capacity (locked): the newest waiting call of the caller
        holding the most gives way, if it holds at least two more than `key` would, as
        (that call, why), None; else None, why `key`'s call is refused."""
        would_hold = self._held(key) + 1
        victim, most = None, would_hold
        for other in self._queues:  # callers with calls waiting: only those can give way
            held = self._held(other)
            if other != key and held > most:
                victim, most = other, held
        full = f"the {self._name} pool, which is full ({self.capacity} calls{self._bound})"
        if victim is None:
            return None, (
                f"{key} already has {would_hold - 1} calls in {full}, and no caller with "
                "calls waiting has more; retry later"
            )
        queue = self._queues[victim]
        future, fn, args, _kwargs = queue.pop()
        if not queue:
            del self._queues[victim]
            if victim in self._in_ready:
                self._in_ready.discard(victim)
                self._ready.remove(victim)
        self._total -= 1
        why = (
            f"{victim} has {most} calls in {full}, the most of any caller: its newest "
            "waiting call gave way to a caller with fewer; retry later"
        )
        return (future, fn, args, why), None

    def _over_cap(self, key: str) -> str | None:
        """Why a new call of `key` is refused, or None (locked)."""
        if self.max_queued is None:
            return None
        running = self._running.get(key, 0)
        waiting = len(self._queues.get(key, ()))
        if running + waiting < self.per_key + self.max_queued:
            return None
        return (
            f"{key} already has {running} calls running and {waiting} waiting for a "
            f"thread (max_queued_calls_per_caller={self.max_queued} beyond its share of "
            f"{self.per_key} threads); retry later"
        )

    def _queue(self, key: str, future: Future[Any], fn, args, kwargs) -> None:
        """Queue the call and wake (or start) a thread for it (locked)."""
        queue = self._queues.setdefault(key, deque())
        queue.append((future, fn, args, kwargs))
        self._total += 1
        self._make_ready(key)
        if key in self._in_ready:
            self._cond.notify()  # an idle thread, if there is one
            if len(self._threads) < self.workers:  # all of them, once the load comes
                thread = threading.Thread(
                    target=self._work, name=f"{self._name}_{len(self._threads)}", daemon=True
                )
                self._threads.append(thread)
                thread.start()

    def _make_ready(self, key: str) -> None:
        """Put `key` in the round if it has queued calls and is under its share (locked)."""
        if (
            key not in self._in_ready
            and self._queues.get(key)
            and self._running.get(key, 0) < self.per_key
        ):
            self._ready.append(key)
            self._in_ready.add(key)

    def _work(self) -> None:
        while True:
            with self._cond:
                while not self._ready:
                    if self._shutdown and not self._queues:
                        return
                    self._cond.wait()
                key = self._ready.popleft()
                self._in_ready.discard(key)
                queue = self._queues[key]
                future, fn, args, kwargs = queue.popleft()
                if not queue:
                    del self._queues[key]
                self._running[key] = self._running.get(key, 0) + 1
                self._make_ready(key)  # to the back of the round, if it may run more
            try:
                if future.set_running_or_notify_cancel():
                    try:
                        future.set_result(fn(*args, **kwargs))
                    except BaseException as exc:
                        future.set_exception(exc)
            finally:
                with self._cond:
                    self._total -= 1
                    count = self._running.pop(key) - 1
                    if count:
                        self._running[key] = count
                    was_ready = key in self._in_ready
                    self._make_ready(key)
                    if key in self._in_ready and not was_ready:
                        self._cond.notify()  # its next call may run now
                    elif self._shutdown and not self._queues:
                        self._cond.notify_all()

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        """No new calls; queued ones still run (cancelled with `cancel_futures`); the
        threads end once nothing is queued."""
        with self._cond:
            self._shutdown = True
            if cancel_futures:
                for queue in self._queues.values():
                    self._total -= len(queue)
                    for future, *_ in queue:
                        future.cancel()
                self._queues.clear()
                self._ready.clear()
                self._in_ready.clear()
            self._cond.notify_all()
            threads = list(self._threads)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


def fair_pool(
    workers: int, share_percent: int, thread_name_prefix: str, max_queued: int | None = None,
    capacity: int | None = None, bound: str = "",
) -> FairPool:  # fmt: skip
    """A pool of `workers` threads of which one caller may hold `share_percent` (one at
    least), and have `max_queued` calls more waiting (None: no cap); `capacity` calls in
    all (None: no bound)."""
    per_key = max(1, workers * share_percent // 100)
    return FairPool(
        workers, per_key, thread_name_prefix, max_queued=max_queued, capacity=capacity,
        bound=bound,
    )  # fmt: skip
