"""Streams on threads of their own, so unary calls run on a pool no bigger than they need.

The synchronous gRPC server runs every call on a thread of its pool, and a Subscribe
stream holds its thread for as long as it is open. Sized for both (`grpc_workers +
max_subscribers`, 288 threads by default) the one pool also let up to 288 unary calls
run at once: under unary load every waiting Send held a thread, and 250 threads taking
turns at the GIL cost more than the calls themselves. Under unary Send load a pool of
a few dozen threads answers more calls a second than one of 288 (docs/lab-log.md has the
runs): calls beyond the pool wait in its queue, and a thread that finishes a call takes
the next without sleeping.

So the server's own pool has `grpc_workers` threads, for unary calls, and every streaming
method of TimerService (Subscribe) runs on a second pool, through grpcio's
per-method pool (a behaviour's `experimental_thread_pool` attribute, grpc/_server.py
`_select_thread_pool_for_behavior`). That pool has `max_subscribers` threads for the
streams the delivery hub admits and `grpc_workers` more: a stream beyond the limit must
still run, to be refused with RESOURCE_EXHAUSTED, and would otherwise wait in the pool's
queue for a thread no open stream gives back. Streams still never starve unary calls.

Health and reflection run on a third pool, small, of their own (`Probes`). Anyone may call
them without a token (reflection only while the server has no token file), and a Watch
or reflection stream held a thread for as long as it was open: on the streams' pool,
idle Watch streams from callers without a token took the threads Subscribe needs, and
the calls queued behind them counted against grpcio's `maximum_concurrent_rpcs` until
it refused every call, health Check included. Now each of Check, Watch and reflection
has a budget of calls at once (in all and per connection), taken before the call waits
for anything, even its request: a caller that sends headers and never the request holds
a place of that budget, not a thread of anyone else's. The pool has a thread for every
place and two more, so a call over its budget is refused at once (RESOURCE_EXHAUSTED,
naming the setting) rather than queued, and health's calls can neither take the threads
of TimerService nor pile up in a queue towards the server's global limit: the pool takes
at most its part of `max_concurrent_rpcs` (timerwheel.wheels.call_room), and refuses a
call beyond, one of the connection holding the most (timerwheel.security.fair_pool).

grpcio reads a request whole, up to `max_request_bytes`, before anyone can look at it, and
a probe's request is a service name or a reflection query. So probes read theirs
`PROBE_READS` at once (one a connection), and one above `PROBE_REQUEST_BYTES` is refused
INVALID_ARGUMENT undecoded: an open Watch no longer keeps a 15 MiB service name. A call
whose request has not come within `request_read_timeout_ms` of its read starting is
cancelled (timerwheel.security.read_timeout), so stalled Checks hold their places that
long at most; a reflection stream, which waits for its next query holding a place, is
cancelled when idle that long.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import grpc

from timerwheel.security.fair_pool import FairPool
from timerwheel.security.guard import REFLECTION_PREFIX
from timerwheel.security.limits import CallBudget, ReceiveGate, connection_identity
from timerwheel.security.read_timeout import ReadTimer, next_request
from timerwheel.wheels.call_room import call_room, probe_threads
from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.settings import Settings

HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
# A probe's request is a service name or a reflection query: a few bytes. grpcio reads any
# request whole, up to max_request_bytes, before it can be looked at; so probes read theirs
# PROBE_READS at once (one a connection), and one above PROBE_REQUEST_BYTES is refused
# undecoded: what callers without a token make the server hold stays a few MiB at rest
# and PROBE_READS x max_request_bytes while read, however many calls they open.
PROBE_READS = 4
PROBE_REQUEST_BYTES = 4096

_HANDLER_OF = {  # (request streaming, response streaming) -> factory, behaviour attribute
    (False, True): (grpc.unary_stream_rpc_method_handler, "unary_stream"),
    (True, False): (grpc.stream_unary_rpc_method_handler, "stream_unary"),
    (True, True): (grpc.stream_stream_rpc_method_handler, "stream_stream"),
}


def on_pool(behaviour, pool: ThreadPoolExecutor):
    """`behaviour` (a method handler's function) run on `pool` instead of the server's."""

    def on_its_pool(request_or_iterator, context):
        return behaviour(request_or_iterator, context)

    on_its_pool.experimental_thread_pool = pool
    on_its_pool.one_request = is_unary(behaviour)
    on_its_pool.at_once = getattr(behaviour, "at_once", False)  # a refusal: answered at once
    return on_its_pool


def is_unary(behaviour) -> bool:
    """A behaviour of one request that reads it itself: the request guard hands such calls
    on as request-streaming (timerwheel.security.guard `_admitted`), so grpcio runs them
    before reading anything; they are still unary calls, on the unary or settle pool."""
    return getattr(behaviour, "one_request", False)


@dataclass(frozen=True)
class Probes:
    """Health's and reflection's pool and their budgets (see the module docstring)."""

    pool: ThreadPoolExecutor
    checks: CallBudget
    watches: CallBudget
    reflection: CallBudget
    reads: ReceiveGate  # requests being read (below)
    read_timer: ReadTimer  # how long a read may take

    @classmethod
    def of(cls, settings: Settings) -> Probes:
        per_peer = settings.max_health_per_peer
        checks = CallBudget(
            settings.max_health_checks, "max_health_checks", per_peer, "max_health_per_peer"
        )
        watches = CallBudget(
            settings.max_health_watches, "max_health_watches", per_peer, "max_health_per_peer"
        )
        streams = settings.max_reflection_streams
        reflection = CallBudget(
            streams, "max_reflection_streams", streams, "max_reflection_streams"
        )
        threads = probe_threads(settings)
        pool = FairPool(
            threads, threads, "grpc-probe", capacity=call_room(settings).probes,
            bound=f"its part of max_concurrent_rpcs={settings.max_concurrent_rpcs}",
        )  # fmt: skip
        timer = ReadTimer(settings.request_read_timeout_ms)
        return cls(pool, checks, watches, reflection, ReceiveGate(PROBE_READS, 1), timer)

    def budget_of(self, method: str) -> tuple[CallBudget, str] | None:
        if method == HEALTH_CHECK:
            return self.checks, "Health.Check"
        if method == HEALTH_WATCH:
            return self.watches, "Health.Watch"
        if method.startswith(REFLECTION_PREFIX):
            return self.reflection, "reflection"
        return None


class TooBig:
    """What a probe's deserializer returns for a request above PROBE_REQUEST_BYTES."""

    __slots__ = ("size",)

    def __init__(self, size: int) -> None:
        self.size = size


def capped(deserializer):
    def deserialize(data: bytes) -> object:
        if len(data) > PROBE_REQUEST_BYTES:
            return TooBig(len(data))  # not decoded: its bytes are dropped
        return deserializer(data)

    return deserialize


def admitted(
    handler: grpc.RpcMethodHandler, budget: CallBudget, what: str, pool, reads: ReceiveGate,
    timer: ReadTimer,
):  # fmt: skip
    """`handler` on `pool`, each call admitted by `budget` before anything else.

    The handler returned reads its request itself (grpcio gives a request-streaming
    behaviour the request iterator at once, where a unary one waits on its thread for the
    request first), so the budget is taken before the call can wait on anything. The
    place is given back when the call ends, however it ends (a context callback)."""

    def admit(context) -> None:
        key = connection_identity(context)
        try:
            budget.acquire(key, what)
        except Overloaded as exc:
            context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        if not context.add_callback(lambda: budget.release(key)):
            budget.release(key)  # the call has already ended

    def each(requests, context):
        """The requests, each read within a place of `reads` and within its size."""
        key = connection_identity(context)
        while True:
            if not reads.acquire(key, context.is_active):
                context.abort(grpc.StatusCode.CANCELLED, f"{what}: the call ended")
            try:
                request = next_request(requests, context, timer, what)
            finally:
                reads.release(key)
            if request is None:
                return
            if isinstance(request, TooBig):
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT,
                    f"{what}: a request of {request.size} bytes; a probe's request is at "
                    f"most {PROBE_REQUEST_BYTES} bytes",
                )
            yield request

    def only(requests, context):
        for request in each(requests, context):
            return request
        context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"{what}: expects one request")

    if handler.request_streaming and handler.response_streaming:
        inner_both = handler.stream_stream

        def both(requests, context):
            admit(context)
            yield from inner_both(each(requests, context), context)

        behaviour, factory = both, grpc.stream_stream_rpc_method_handler
    elif handler.response_streaming:
        inner_stream = handler.unary_stream

        def stream(requests, context):
            admit(context)
            yield from inner_stream(only(requests, context), context)

        behaviour, factory = stream, grpc.stream_stream_rpc_method_handler
    elif handler.request_streaming:
        inner_unary_of_stream = handler.stream_unary

        def unary_of_stream(requests, context):
            admit(context)
            return inner_unary_of_stream(each(requests, context), context)

        behaviour, factory = unary_of_stream, grpc.stream_unary_rpc_method_handler
    else:
        inner_unary = handler.unary_unary

        def unary(requests, context):
            admit(context)
            return inner_unary(only(requests, context), context)

        behaviour, factory = unary, grpc.stream_unary_rpc_method_handler
    return factory(
        on_pool(behaviour, pool), capped(handler.request_deserializer),
        handler.response_serializer,
    )  # fmt: skip


class StreamPool(grpc.ServerInterceptor):
    """Puts every streaming method's calls on `pool`, and health's and reflection's on
    `probes` (when given) within their budgets; unary calls keep the server's pool."""

    def __init__(self, pool: ThreadPoolExecutor, probes: Probes | None = None) -> None:
        self._pool = pool
        self._probes = probes

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None:
            return handler
        probe = self._probes.budget_of(details.method) if self._probes else None
        if probe is not None:
            probes = self._probes
            return admitted(handler, *probe, probes.pool, probes.reads, probes.read_timer)
        if not (handler.request_streaming or handler.response_streaming):
            return handler
        factory, attribute = _HANDLER_OF[handler.request_streaming, handler.response_streaming]
        behaviour = getattr(handler, attribute)
        if is_unary(behaviour) and not handler.response_streaming:
            return handler  # a unary call that reads its own request (the guard's)
        return factory(
            on_pool(behaviour, self._pool),
            handler.request_deserializer,
            handler.response_serializer,
        )
