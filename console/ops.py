"""The console's operator views and timer actions (issue 78), beside console/app.py's:

    GET  /api/inflight?topic=T                  TimerAdmin.InFlight: fired, not acked messages
    GET  /api/consumers[?topic=T]               TimerAdmin.Consumers: streams and lag
    GET  /api/search?topic=T[&id_prefix=&property=K=V...&from_ms=&to_ms=&page_token=]
                                                List with its search fields (one page)
    GET  /api/throughput                        Stats' sends/fires/acks counters
    POST /api/fire-now    {"message_id": ID}    Reschedule to now, then Get
    POST /api/reschedule  {"message_id": ID, "when": ISO time or delay}  Reschedule, then Get

Each is one or two calls of the API with the page's token, so its roles decide: InFlight
and Consumers are admin only, search is List's (producer or admin), a fire now or a
reschedule is Reschedule's (producer on the timer's topic, or admin; never a consumer).
"""

from __future__ import annotations

from datetime import UTC, datetime

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from timerwheel.console.views import moment, pending_row_json, timer_json
from timerwheel.durations import parse_duration_ms
from timerwheel.v1 import timerwheel_pb2 as pb

SEARCH_PAGE = 20
MAX_PROPERTIES = 16


def routes(backend, token_of, helpers) -> list[Route]:
    """The routes, over `backend` (console.app.ApiBackend); `helpers` is console.app's
    module (its parameter checks and JSON answers), passed to keep the imports one-way."""
    service, admin = backend.client.service, backend.client.admin
    required, integer, json_field, answer = (
        helpers._required, helpers._integer, helpers._json_field, helpers._json,
    )  # fmt: skip
    bad_request = helpers.BadRequest

    def in_flight(request: Request) -> JSONResponse:
        topic = required(request, "topic")
        limit = integer(request, "limit", 100, 1, 1000)
        got = backend.call(
            admin.InFlight, pb.InFlightRequest(topic=topic, limit=limit), token_of(request)
        )
        now_ms = backend.now_ms()
        return answer({
            "topic": topic, "now": moment(now_ms, now_ms),
            "messages": [{
                "message_id": m.message_id, "attempt": m.attempt, "in_flight": m.in_flight,
                "consumer": m.consumer, "peer": m.peer, "ack_due_in_ms": m.ack_due_in_ms,
                "deliver_at": moment(m.deliver_at_ms, now_ms),
                "fired_at": moment(m.fired_at_ms, now_ms),
            } for m in got.messages],
            "fired_unacked": got.fired_unacked, "tracked": got.tracked,
            "untracked_reason": got.untracked_reason,
        })  # fmt: skip

    def consumers(request: Request) -> JSONResponse:
        topic = request.query_params.get("topic", "")
        got = backend.call(admin.Consumers, pb.ConsumersRequest(topic=topic), token_of(request))
        now_ms = backend.now_ms()
        return answer({
            "now": moment(now_ms, now_ms),
            "consumers": [{
                "topic": c.topic, "consumer": c.consumer, "peer": c.peer,
                "in_flight": c.in_flight, "max_in_flight": c.max_in_flight,
                "connected_at": moment(c.connected_at_ms, now_ms), "draining": c.draining,
            } for c in got.consumers],
            "lag": [{
                "topic": t.topic, "consumers": t.consumers, "pending": t.pending,
                "fired_unacked": t.fired_unacked, "in_flight": t.in_flight,
                "oldest_unacked": moment(t.oldest_unacked_fired_at_ms, now_ms),
            } for t in got.lag],
        })  # fmt: skip

    def search(request: Request) -> JSONResponse:
        topic = required(request, "topic")
        properties = _properties(request.query_params.getlist("property"), bad_request)
        page = pb.ListRequest(
            topic=topic, from_ms=integer(request, "from_ms", 0, 0),
            to_ms=integer(request, "to_ms", 0, 0),
            limit=integer(request, "limit", SEARCH_PAGE, 1, 500),
            page_token=request.query_params.get("page_token", ""),
            id_prefix=request.query_params.get("id_prefix", ""), properties=properties,
        )  # fmt: skip
        got = backend.call(service.List, page, token_of(request))
        now_ms = backend.now_ms()
        return answer({
            "topic": topic, "now": moment(now_ms, now_ms),
            "timers": [pending_row_json(m, now_ms) for m in got.messages],
            "next_page_token": got.next_page_token,
        })  # fmt: skip

    def throughput(request: Request) -> JSONResponse:
        stats = backend.call(admin.Stats, pb.StatsRequest(), token_of(request))
        return answer({
            "now_ms": stats.now_ms, "sends_total": stats.sends_total,
            "fires_total": stats.fires_total, "acks_total": stats.acks_total,
        })  # fmt: skip

    async def fire_now(request: Request) -> JSONResponse:
        message_id = await json_field(request, "fire now", "message_id", "the timer to fire")
        move = pb.RescheduleRequest(message_id=message_id, delay_ms=0)
        return await run_in_threadpool(_move, move, token_of(request))

    async def reschedule(request: Request) -> JSONResponse:
        message_id = await json_field(
            request, "reschedule", "message_id", "the timer to reschedule"
        )
        when = await json_field(
            request, "reschedule", "when", "its new time (ISO 8601) or a delay such as 10m"
        )
        move = _reschedule_request(message_id, when, bad_request)
        return await run_in_threadpool(_move, move, token_of(request))

    def _move(move: pb.RescheduleRequest, token: str) -> JSONResponse:
        moved = backend.call(service.Reschedule, move, token)
        lookup = pb.GetRequest(message_id=move.message_id, include_body=True, include_trace=True)
        message = backend.call(service.Get, lookup, token)
        now_ms = backend.now_ms()
        return answer({
            "deliver_at": moment(moved.deliver_at_ms, now_ms), "now": moment(now_ms, now_ms),
            "timer": timer_json(message, now_ms),
        })  # fmt: skip

    return [
        Route("/api/inflight", in_flight),
        Route("/api/consumers", consumers),
        Route("/api/search", search),
        Route("/api/throughput", throughput),
        Route("/api/fire-now", fire_now, methods=["POST"]),
        Route("/api/reschedule", reschedule, methods=["POST"]),
    ]


def _properties(given: list[str], bad_request) -> dict[str, str]:
    """`key=value` query parameters as the List's property filter."""
    if len(given) > MAX_PROPERTIES:
        raise bad_request(f"property: {len(given)} given; at most {MAX_PROPERTIES}")
    properties = {}
    for text in given:
        key, equals, value = text.partition("=")
        if not equals or not key.strip():
            raise bad_request(f"property={text!r}: give key=value")
        properties[key.strip()] = value
    return properties


def _reschedule_request(message_id: str, when: str, bad_request) -> pb.RescheduleRequest:
    """A new time as ISO 8601 (UTC unless it names an offset), or a delay from now."""
    text = when.strip()
    try:
        moment_at = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        try:
            delay_ms = parse_duration_ms(text, "when")
        except ValueError:
            raise bad_request(
                f"when={when!r}: give a time (ISO 8601, e.g. 2030-01-01T09:00:00Z; UTC "
                "unless it says otherwise) or a delay such as 10m"
            ) from None
        return pb.RescheduleRequest(message_id=message_id, delay_ms=delay_ms)
    if moment_at.tzinfo is None:
        moment_at = moment_at.replace(tzinfo=UTC)
    return pb.RescheduleRequest(
        message_id=message_id, deliver_at_ms=int(moment_at.timestamp() * 1000)
    )
