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
method (Subscribe, health's Watch, reflection) runs on a second pool, through grpcio's
per-method pool (a behaviour's `experimental_thread_pool` attribute, grpc/_server.py
`_select_thread_pool_for_behavior`). That pool has `max_subscribers` threads for the
streams the delivery hub admits and `grpc_workers` more: a stream beyond the limit must
still run, to be refused with RESOURCE_EXHAUSTED, and would otherwise wait in the pool's
queue for a thread no open stream gives back. Streams still never starve unary calls.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc

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
    return on_its_pool


class StreamPool(grpc.ServerInterceptor):
    """Puts every streaming method's calls on `pool`; unary calls keep the server's."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or not (handler.request_streaming or handler.response_streaming):
            return handler
        factory, attribute = _HANDLER_OF[handler.request_streaming, handler.response_streaming]
        return factory(
            on_pool(getattr(handler, attribute), self._pool),
            handler.request_deserializer,
            handler.response_serializer,
        )
