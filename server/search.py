"""List with search fields (ListRequest.id_prefix, .properties): pages of the topic's
pending timers, filtered here.

The engine lists a topic's SCHEDULED timers by time, a bounded page a call; a search
asks it for pages and keeps the timers that match, until the answer holds `limit` of
them or it has scanned `SEARCH_SCAN_TIMERS`. Each page asked for is at most the matches
still wanted, so the answer never holds more than `limit` and its next_page_token (the
engine's, after the last timer scanned) resumes exactly where the scan stopped: no match
is skipped or given twice. With include_body it reads one page a call (the List's byte
budget holds one page of bodies). A rare prefix over a big topic answers short, or empty, with a
token: the caller calls again, as for any page.
"""

from __future__ import annotations

from timerwheel.engine.api import TimerApi
from timerwheel.security.scopes import call_scope, view
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import InvalidArgument, Timer

# Timers one search call scans at most: a bound on its time, whatever matches.
SEARCH_SCAN_TIMERS = 20_000
MAX_PREFIX_LEN = 256
MAX_PROPERTY_FILTERS = 16
LIST_DEFAULT = 100


def is_search(request: pb.ListRequest) -> bool:
    return bool(request.id_prefix or request.properties)


def validate_search(request: pb.ListRequest) -> None:
    if len(request.id_prefix) > MAX_PREFIX_LEN:
        raise InvalidArgument(
            "id_prefix", request.id_prefix[:40] + "...", f"at most {MAX_PREFIX_LEN} characters"
        )
    if len(request.properties) > MAX_PROPERTY_FILTERS:
        raise InvalidArgument(
            "properties", f"<{len(request.properties)} properties>",
            f"at most {MAX_PROPERTY_FILTERS} to match",
        )  # fmt: skip
    for key in request.properties:
        if not key:
            raise InvalidArgument("properties", "", "a property to match needs a key")


def matches(timer: Timer, id_prefix: str, properties: dict[str, str], scope: str = "") -> bool:
    """`scope`: the caller's id scope (timerwheel.security.scopes): the prefix matches
    ids as that token is shown them."""
    shown = view(scope, timer.message_id) if scope else timer.message_id
    if not shown.startswith(id_prefix):
        return False
    held = timer.properties
    return all(held.get(key) == value for key, value in properties.items())


def search_pending(
    engine: TimerApi, request: pb.ListRequest, to_ms: int
) -> tuple[list[Timer], str]:
    """(matching timers, at most the request's limit; the token to go on, "" at the end)."""
    validate_search(request)
    limit = request.limit or LIST_DEFAULT  # the engine refuses a bad limit, naming it
    wanted = dict(request.properties)
    scope, _ = call_scope()
    found: list[Timer] = []
    token, scanned = request.page_token, 0
    while True:
        page, token = engine.list_pending(
            request.topic, request.from_ms, to_ms, limit - len(found), token,
            request.include_body,
        )  # fmt: skip
        scanned += len(page)
        found.extend(t for t in page if matches(t, request.id_prefix, wanted, scope))
        # With bodies, one page a call: the List holds one page's max_list_bytes of them.
        done = not token or len(found) >= limit or request.include_body
        if done or scanned >= SEARCH_SCAN_TIMERS:
            return found, token
