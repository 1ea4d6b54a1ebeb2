"""Acks and Nacks on threads of their own, so a consumer's settlements never wait behind sends.

A subscriber's room (its `max_in_flight`) comes back when its Ack reaches the delivery
hub (`TopicDispatcher.settle`). On the server's one pool of `grpc_workers` threads, an
Ack waited in the pool's queue behind every Send queued before it, and under load each
of those Sends holds its thread until its group commit: with producers keeping hundreds
of requests outstanding at a high send rate, Acks were answered hundreds of milliseconds
late, so the consumer's window was held shut and delivery ran at a fraction of the send
rate while the sends went on (docs/lab-log.md has the runs).

So Ack and Nack run on a pool of `settle_workers` threads of their own, through grpcio's
per-method pool (a behaviour's `experimental_thread_pool` attribute, as
`timerwheel.server.stream_pool` does for streams): they wait only behind other settlements. They
still go through the request guard and the same servicer methods; only the thread they
run on changes.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc

from timerwheel.server.stream_pool import is_unary, on_pool

SETTLE_METHODS = frozenset({"/timerwheel.v1.TimerService/Ack", "/timerwheel.v1.TimerService/Nack"})


class SettlePool(grpc.ServerInterceptor):
    """Puts Ack and Nack calls on `pool`; every other unary call keeps the server's."""

    def __init__(self, pool: ThreadPoolExecutor) -> None:
        self._pool = pool

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or details.method not in SETTLE_METHODS:
            return handler
        if handler.request_streaming:
            if not is_unary(handler.stream_unary):
                return handler  # the guard's refusals read no request and run anywhere
            return grpc.stream_unary_rpc_method_handler(  # the guard reads the request
                on_pool(handler.stream_unary, self._pool),
                handler.request_deserializer,
                handler.response_serializer,
            )
        return grpc.unary_unary_rpc_method_handler(
            on_pool(handler.unary_unary, self._pool),
            handler.request_deserializer,
            handler.response_serializer,
        )
