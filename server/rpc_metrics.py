"""Every gRPC call counted and timed, by method and final status code (docs/metrics.md).

`grpc_server_started_total`, `grpc_server_handled_total{grpc_code}` and the
`grpc_server_handling_seconds` histogram, with grpc-ecosystem's labels (grpc_service,
grpc_method, grpc_type), so the dashboards and queries written for other gRPC servers
apply. Installed only while metrics are on (`serve --metrics-port`).

grpcio's server interceptors see a method's handler, not its calls, so this one wraps the
handler's behaviour: the clock starts when the behaviour is entered and stops when it
returns, raises or (for a response stream) its generator ends. The code is what the
call's context holds by then (`context.abort` and `set_code` put it there); a behaviour
that returned without one answered OK, one that raised without one answered UNKNOWN
(grpcio's answer to an unexpected exception), and a response stream closed before its
end was cancelled by its caller (CANCELLED).

It is the outermost interceptor, so it sees what the guard and the pools answer too
(refusals, budgets), and carries over the pool the others chose (a behaviour's
`experimental_thread_pool`). Per call it costs two clock reads, one dict lookup and three
increments: each method's label children are bound on its first call.
"""

from __future__ import annotations

import time

import grpc
from google.protobuf import descriptor_pool

from timerwheel.observability.metrics import Recorder, RpcInstruments

_ATTRIBUTE = {  # (request streaming, response streaming) -> behaviour attribute, grpc_type
    (False, False): ("unary_unary", "unary"),
    (True, False): ("stream_unary", "client_stream"),
    (False, True): ("unary_stream", "server_stream"),
    (True, True): ("stream_stream", "bidi_stream"),
}
_FACTORY = {
    "unary_unary": grpc.unary_unary_rpc_method_handler,
    "stream_unary": grpc.stream_unary_rpc_method_handler,
    "unary_stream": grpc.unary_stream_rpc_method_handler,
    "stream_stream": grpc.stream_stream_rpc_method_handler,
}
OK, UNKNOWN, CANCELLED = "OK", "UNKNOWN", "CANCELLED"


def declared_type(method: str, handler: grpc.RpcMethodHandler) -> str:
    """The method's grpc_type as its service declares it: the guard answers a refused
    unary call from a request-streaming handler, which must not change the label."""
    service, _, name = method.lstrip("/").rpartition("/")
    try:
        found = descriptor_pool.Default().FindServiceByName(service).methods_by_name[name]
    except KeyError:
        return _ATTRIBUTE[handler.request_streaming, handler.response_streaming][1]
    return _ATTRIBUTE[found.client_streaming, found.server_streaming][1]


def final_code(context, default: str) -> str:
    code = context.code()
    return code.name if isinstance(code, grpc.StatusCode) else default


def measured(behaviour, instruments: RpcInstruments, response_streaming: bool):
    """`behaviour`, counted and timed; keeps the thread pool another interceptor set, and
    the mark of a refusal answered at once (timerwheel.security.fair_pool)."""
    clock = time.perf_counter
    if response_streaming:

        def streaming(request, context):
            instruments.started()
            started = clock()
            code = CANCELLED  # closed before its end: the caller went away
            try:
                yield from behaviour(request, context)
                code = final_code(context, OK)
            except GeneratorExit:
                raise
            except BaseException:
                code = final_code(context, UNKNOWN)
                raise
            finally:
                instruments.handled(code, clock() - started)

        wrapped = streaming
    else:

        def unary(request, context):
            instruments.started()
            started = clock()
            try:
                response = behaviour(request, context)
            except BaseException:
                instruments.handled(final_code(context, UNKNOWN), clock() - started)
                raise
            instruments.handled(final_code(context, OK), clock() - started)
            return response

        wrapped = unary
    pool = getattr(behaviour, "experimental_thread_pool", None)
    if pool is not None:
        wrapped.experimental_thread_pool = pool  # type: ignore[attr-defined]
    if getattr(behaviour, "at_once", False):  # a refusal, answered where it is submitted
        wrapped.at_once = True  # type: ignore[attr-defined]
    return wrapped


class RpcMetrics(grpc.ServerInterceptor):
    """Wraps every known method's handler (unknown ones are UNIMPLEMENTED, not counted)."""

    def __init__(self, recorder: Recorder) -> None:
        self._recorder = recorder
        self._methods: dict[str, RpcInstruments] = {}  # by method path, bound once each

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None:
            return None
        method = details.method
        instruments = self._methods.get(method)
        if instruments is None:
            service, _, name = method.lstrip("/").rpartition("/")
            kind = declared_type(method, handler)
            instruments = self._methods[method] = self._recorder.rpc(service, name, kind)
        attribute, _ = _ATTRIBUTE[handler.request_streaming, handler.response_streaming]
        behaviour = measured(getattr(handler, attribute), instruments, handler.response_streaming)
        return _FACTORY[attribute](
            behaviour, handler.request_deserializer, handler.response_serializer
        )
