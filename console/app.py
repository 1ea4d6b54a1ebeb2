"""The console's web app (Starlette): the page, its static files and its JSON endpoints.

Every endpoint is one or a few calls of the server's own gRPC API through `ApiBackend`,
so the console shows exactly what the API shows and the API's auth decides what it may
do: the page's bearer token (the `Authorization` header of its requests) goes with each
call, and the API's refusals come back with its message, as HTTP statuses:

    GET  /api/timer?id=ID                       Get with body and trace
    POST /api/cancel      {"message_id": ID}    Cancel, then the timer as Get shows it
    POST /api/pause       {"series_id": ID}     PauseSeries, then the series as Get shows it
    POST /api/resume      {"series_id": ID}     ResumeSeries, then the series as Get shows it
    POST /api/purge       {"topic": T}          TimerAdmin.Purge of the topic (one call)
    POST /api/redrive     {"dead_letter_topic": T}  TimerAdmin.Redrive of all its dead letters
    GET  /api/pending?topic=T[&from_ms=&limit=&page_token=]   List (one page)
    GET  /api/topics[?limit=&page_token=]       TimerAdmin.Topics: a page of topic backlogs
    GET  /api/due?topic=T                       Count per minute over the next hour
    GET  /api/lateness                          Stats.fire_lateness, per minute
    ... and the operator views and timer actions of console/ops.py (in-flight, consumers,
    search, throughput, fire now, reschedule).

An error answer is `{"error": message, "code": gRPC code name}`: NOT_FOUND 404,
INVALID_ARGUMENT 400, UNAUTHENTICATED 401, PERMISSION_DENIED 403, FAILED_PRECONDITION
409, RESOURCE_EXHAUSTED 429, UNAVAILABLE 503, anything else 502.

Browser hardening: an action (cancel, pause, resume, purge, redrive, fire now,
reschedule) must be sent as JSON (a cross-site form cannot, and the console answers no
CORS preflight), a loopback console
accepts only loopback Host headers (no DNS rebinding), and every answer carries a strict
Content-Security-Policy.
Endpoints are plain functions: Starlette runs them on its thread pool, where the
blocking gRPC calls belong.
"""

from __future__ import annotations

import sys
from pathlib import Path

import grpc
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.middleware.trustedhost import TrustedHostMiddleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from timerwheel import Client, RemoteError
from timerwheel.common import is_loopback_host
from timerwheel.console.views import moment, pending_row_json, timer_json
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.clock import Clock

STATIC = Path(__file__).parent / "static"
CALL_TIMEOUT_S = 10.0
DUE_MINUTES = 60
PAGE_LIMIT_MAX = 500
# Topics in one page of the topics view: a page a browser renders at once, by default
# and at most (the server's own default is larger).
TOPICS_PAGE = 200
TOPICS_PAGE_MAX = 1_000
# Messages one purge or redrive from the page changes at most: the API's largest call;
# beyond it the answer says more remain and the operator clicks again.
BULK_LIMIT = 10_000
HTTP_STATUS = {
    grpc.StatusCode.INVALID_ARGUMENT: 400,
    grpc.StatusCode.UNAUTHENTICATED: 401,
    grpc.StatusCode.PERMISSION_DENIED: 403,
    grpc.StatusCode.NOT_FOUND: 404,
    grpc.StatusCode.FAILED_PRECONDITION: 409,
    grpc.StatusCode.ALREADY_EXISTS: 409,
    grpc.StatusCode.RESOURCE_EXHAUSTED: 429,
    grpc.StatusCode.UNAVAILABLE: 503,
    grpc.StatusCode.DEADLINE_EXCEEDED: 504,
}
SECURITY_HEADERS = {
    "Content-Security-Policy": (
        "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'"
    ),  # Chartist sets style attributes on its SVG
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
LOOPBACK_NAMES = ["127.0.0.1", "localhost", "::1", "[::1]"]


class BadRequest(Exception):
    """A console parameter is wrong: 400 with a message naming it and its value."""


class ApiBackend:
    """The gRPC API as the console calls it: one `timerwheel.Client` on the server's own
    port, each call carrying the page's token; `now_ms` is the server's clock."""

    def __init__(self, target: str, clock: Clock) -> None:
        self.client = Client(target, timeout_s=CALL_TIMEOUT_S)
        self._clock = clock

    def now_ms(self) -> int:
        return self._clock.now_ms()

    def call(self, method, request, token: str):
        try:
            return method(request, timeout=CALL_TIMEOUT_S, metadata=_metadata(token))
        except grpc.RpcError as error:
            raise RemoteError.of(error) from None

    def call_many(self, method, requests: list, token: str) -> list:
        """The calls at once (grpc futures), answers in order."""
        metadata = _metadata(token)
        futures = [method.future(r, timeout=CALL_TIMEOUT_S, metadata=metadata) for r in requests]
        try:
            return [future.result() for future in futures]
        except grpc.RpcError as error:
            for future in futures:
                future.cancel()
            raise RemoteError.of(error) from None

    def close(self) -> None:
        self.client.close()


def _metadata(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),) if token else ()


def build_app(backend: ApiBackend, host: str) -> Starlette:
    """The app for a console bound to `host` (loopback: only loopback Host headers)."""
    from timerwheel.console.ops import routes as ops_routes  # it uses this module's helpers

    service, admin = backend.client.service, backend.client.admin

    def token_of(request: Request) -> str:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        return token.strip() if scheme.lower() == "bearer" else ""

    def get_timer(request: Request) -> JSONResponse:
        message_id = _required(request, "id")
        lookup = pb.GetRequest(message_id=message_id, include_body=True, include_trace=True)
        message = backend.call(service.Get, lookup, token_of(request))
        now_ms = backend.now_ms()
        return _json({"now": moment(now_ms, now_ms), "timer": timer_json(message, now_ms)})

    async def cancel(request: Request) -> JSONResponse:
        message_id = await _json_field(
            request, "cancel", "message_id", "the id of the timer to cancel"
        )
        return await run_in_threadpool(_cancel, message_id, token_of(request))

    async def pause(request: Request) -> JSONResponse:
        series_id = await _json_field(request, "pause", "series_id", "the series to pause")
        return await run_in_threadpool(_pause, series_id, True, token_of(request))

    async def resume(request: Request) -> JSONResponse:
        series_id = await _json_field(request, "resume", "series_id", "the series to resume")
        return await run_in_threadpool(_pause, series_id, False, token_of(request))

    def _pause(series_id: str, paused: bool, token: str) -> JSONResponse:
        if paused:
            answer = backend.call(
                service.PauseSeries, pb.PauseSeriesRequest(series_id=series_id), token
            )
        else:
            request = pb.ResumeSeriesRequest(series_id=series_id)
            answer = backend.call(service.ResumeSeries, request, token)
        lookup = pb.GetRequest(message_id=series_id, include_body=True, include_trace=True)
        message = backend.call(service.Get, lookup, token)
        now_ms = backend.now_ms()
        return _json({
            "changed": answer.changed, "now": moment(now_ms, now_ms),
            "timer": timer_json(message, now_ms),
        })  # fmt: skip

    async def purge(request: Request) -> JSONResponse:
        topic = await _json_field(request, "purge", "topic", "the topic to purge")
        return await run_in_threadpool(_purge, topic, token_of(request))

    def _purge(topic: str, token: str) -> JSONResponse:
        selected = pb.TimerFilter(topic=topic)
        answer = backend.call(admin.Purge, pb.BulkRequest(filter=selected, limit=BULK_LIMIT), token)
        return _json({
            "topic": topic, "cancelled": answer.cancelled, "purged": answer.purged,
            "more": answer.more,
        })  # fmt: skip

    async def redrive(request: Request) -> JSONResponse:
        topic = await _json_field(
            request, "redrive", "dead_letter_topic", "the dead-letter topic to redrive"
        )
        return await run_in_threadpool(_redrive, topic, token_of(request))

    def _redrive(topic: str, token: str) -> JSONResponse:
        moving = pb.RedriveRequest(dead_letter_topic=topic, limit=BULK_LIMIT)
        answer = backend.call(admin.Redrive, moving, token)
        return _json({"dead_letter_topic": topic, "moved": answer.moved, "more": answer.more})

    def _cancel(message_id: str, token: str) -> JSONResponse:
        backend.call(service.Cancel, pb.CancelRequest(message_id=message_id), token)
        lookup = pb.GetRequest(message_id=message_id, include_body=True, include_trace=True)
        message = backend.call(service.Get, lookup, token)
        now_ms = backend.now_ms()
        return _json({"now": moment(now_ms, now_ms), "timer": timer_json(message, now_ms)})

    def pending(request: Request) -> JSONResponse:
        topic = _required(request, "topic")
        page = pb.ListRequest(
            topic=topic, from_ms=_integer(request, "from_ms", 0, 0),
            limit=_integer(request, "limit", 50, 1, PAGE_LIMIT_MAX),
            page_token=request.query_params.get("page_token", ""),
        )  # fmt: skip
        answer = backend.call(service.List, page, token_of(request))
        now_ms = backend.now_ms()
        return _json({
            "topic": topic, "now": moment(now_ms, now_ms),
            "timers": [pending_row_json(m, now_ms) for m in answer.messages],
            "next_page_token": answer.next_page_token,
        })  # fmt: skip

    def topics(request: Request) -> JSONResponse:
        page = pb.TopicsRequest(
            limit=_integer(request, "limit", TOPICS_PAGE, 1, TOPICS_PAGE_MAX),
            page_token=request.query_params.get("page_token", ""),
        )
        answer = backend.call(admin.Topics, page, token_of(request))
        return _json({"topics": [
            {"topic": t.topic, "pending": t.pending, "fired_unacked": t.fired_unacked}
            for t in answer.topics
        ], "next_page_token": answer.next_page_token, "total": answer.total})  # fmt: skip

    def due(request: Request) -> JSONResponse:
        topic = _required(request, "topic")
        now_ms = backend.now_ms()
        first_ms = now_ms - now_ms % 60_000
        starts = [first_ms + minute * 60_000 for minute in range(DUE_MINUTES)]
        counts = backend.call_many(
            service.Count,
            [pb.CountRequest(topic=topic, from_ms=s, to_ms=s + 60_000) for s in starts],
            token_of(request),
        )
        return _json({
            "topic": topic, "now": moment(now_ms, now_ms),
            "minutes": [{"minute": moment(s, now_ms), "count": c.pending}
                        for s, c in zip(starts, counts, strict=True)],
        })  # fmt: skip

    def lateness(request: Request) -> JSONResponse:
        stats = backend.call(admin.Stats, pb.StatsRequest(), token_of(request))
        now_ms = backend.now_ms()
        return _json({"now": moment(now_ms, now_ms), "minutes": [
            {"minute": moment(m.minute_ms, now_ms), "fires": m.fires, "p50_ms": m.p50_ms,
             "p99_ms": m.p99_ms, "max_ms": m.max_ms}
            for m in stats.fire_lateness
        ]})  # fmt: skip

    def page(_request: Request) -> FileResponse:
        return FileResponse(STATIC / "index.html", headers=SECURITY_HEADERS)

    routes = [
        Route("/", page),
        Route("/api/timer", get_timer),
        Route("/api/cancel", cancel, methods=["POST"]),
        Route("/api/pause", pause, methods=["POST"]),
        Route("/api/resume", resume, methods=["POST"]),
        Route("/api/purge", purge, methods=["POST"]),
        Route("/api/redrive", redrive, methods=["POST"]),
        Route("/api/pending", pending),
        Route("/api/topics", topics),
        Route("/api/due", due),
        Route("/api/lateness", lateness),
        *ops_routes(backend, token_of, sys.modules[__name__]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    middleware = []
    if is_loopback_host(host):
        middleware.append(Middleware(TrustedHostMiddleware, allowed_hosts=LOOPBACK_NAMES))
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={
            RemoteError: _remote_error,
            BadRequest: _bad_request,
            HTTPException: _http_error,
        },
    )


async def _json_field(request: Request, action: str, name: str, what: str) -> str:
    """The string `name` of a JSON request body; BadRequest naming it otherwise."""
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise BadRequest(f"send the {action} as JSON (Content-Type: application/json)")
    try:
        body = await request.json()
    except ValueError as exc:
        raise BadRequest(f"the request body is not JSON: {exc}") from None
    value = body.get(name) if isinstance(body, dict) else None
    if not isinstance(value, str) or not value:
        raise BadRequest(f"{name}={value!r}: give {what}")
    return value


def _required(request: Request, name: str) -> str:
    value = request.query_params.get(name, "")
    if not value:
        raise BadRequest(f"{name}='': give a {name}")
    return value


def _integer(request: Request, name: str, default: int, low: int, high: int | None = None) -> int:
    text = request.query_params.get(name)
    if text is None or text == "":
        return default
    try:
        value = int(text)
    except ValueError:
        raise BadRequest(f"{name}={text!r}: not an integer") from None
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise BadRequest(f"{name}={value}: must be {bounds}")
    return value


def _json(content: dict, status_code: int = 200) -> JSONResponse:
    return JSONResponse(content, status_code=status_code, headers=SECURITY_HEADERS)


async def _remote_error(_request: Request, error: RemoteError) -> JSONResponse:
    status = HTTP_STATUS.get(error.code, 502)
    return _json({"error": error.details, "code": error.code.name}, status)


async def _bad_request(_request: Request, error: BadRequest) -> JSONResponse:
    return _json({"error": str(error), "code": "INVALID_ARGUMENT"}, 400)


async def _http_error(_request: Request, error: HTTPException) -> JSONResponse:
    return _json({"error": error.detail, "code": "HTTP"}, error.status_code)
