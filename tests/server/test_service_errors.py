"""Every bad input, over real gRPC: the status code, a message naming the field and the value,
and nothing stored. One fresh server per case, so "nothing stored" is exact: the store's
message, wheel and ready column families hold no key afterwards."""

from __future__ import annotations

from collections.abc import Callable

import grpc
import pytest
from helpers.calls import status_of
from helpers.time_of_day import wall_ms
from structlog.testing import capture_logs

from timerwheel.client import TimerClient
from timerwheel.retries import RETRY_AFTER_KEY
from timerwheel.server.errors import RefusalLog, rpc_errors
from timerwheel.server.forwarding import _PartContext, _PartFailed
from timerwheel.store.export import ExportError
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import (
    AdmissionRefused,
    AlreadyExists,
    DiskFull,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    ShuttingDown,
    StoreUnavailable,
)
from timerwheel.wheels.settings import DAY_MS, Settings

pytestmark = pytest.mark.wallclock

DEFAULTS = Settings()
INVALID = grpc.StatusCode.INVALID_ARGUMENT
NOT_FOUND = grpc.StatusCode.NOT_FOUND
MAX_DELAY = DEFAULTS.max_delay_ms
NOW_MS = wall_ms()  # absolute times below are this far off, whenever the case runs
ID = "checked-id"  # a valid id used by cases whose bad field is elsewhere: must stay unknown


def send(topic="badcheck", body=b"x", properties=None, message_id=ID, **when):
    """A Send call with one field changed from a valid request."""
    if not when:
        when = {"delay_ms": 60_000}
    when = {k: v for k, v in when.items() if v is not None}
    return lambda c: c.send(topic, body, properties=properties, message_id=message_id, **when)


def batch(*requests: pb.SendRequest):
    return lambda c: c.send_batch(list(requests))


def subscribe(topic: str, max_in_flight: int = 0):
    return lambda c: next(iter(c.subscribe(topic, max_in_flight)))


GOOD = TimerClient.request("badcheck", b"ok", delay_ms=60_000, message_id="batch-ok")

# (case, call(client) -> the failing call, code, fragments the message must hold)
CASES: list[tuple[str, Callable, grpc.StatusCode, list[str]]] = [
    ("empty topic", send(topic=""), INVALID, ["topic=''", "empty"]),
    ("long topic", send(topic="t" * 128), INVALID, ["topic='tttt", "128"]),
    ("illegal topic", send(topic="a b/c"), INVALID, ["topic='a b/c'"]),
    ("body over limit", send(body=b"b" * (4 * 1024 * 1024 + 1)), INVALID,
     ["body=<4194305 bytes>", "4194304"]),
    ("too many properties", send(properties={f"k{i}": "v" for i in range(65)}),
     INVALID, ["properties=", "<65 entries>"]),
    ("property value too large", send(properties={"k": "v" * 16_385}), INVALID,
     ["properties['k']", "16385"]),
    ("property key too long", send(properties={"k" * 129: "v"}), INVALID,
     ["properties[", "129"]),
    ("properties too large in total",
     send(properties={f"k{i}": "v" * 15_000 for i in range(5)}), INVALID,
     ["properties='<75010 bytes>'", "65536"]),
    ("negative delay", send(delay_ms=-1), INVALID, ["delay_ms=-1", "negative"]),
    ("delay beyond the cap", send(delay_ms=MAX_DELAY + 1), INVALID,
     [f"delay_ms={MAX_DELAY + 1}"]),
    ("time beyond the cap", send(deliver_at_ms=NOW_MS + MAX_DELAY + DAY_MS), INVALID,
     [f"deliver_at_ms={NOW_MS + MAX_DELAY + DAY_MS}"]),
    ("far past", send(deliver_at_ms=NOW_MS - 2 * DAY_MS), INVALID,
     [f"deliver_at_ms={NOW_MS - 2 * DAY_MS}", "past"]),
    ("deliver_at zero", send(deliver_at_ms=0), INVALID, ["deliver_at_ms=0"]),
    ("level 0", send(delay_level=0), INVALID, ["delay_level=0", "1..18"]),
    ("level 19", send(delay_level=19), INVALID, ["delay_level=19", "1..18"]),
    ("neither time", lambda c: c.send("badcheck", b"x", message_id=ID),
     INVALID, ["when=None", "deliver_at_ms, delay_ms or delay_level"]),
    ("illegal message id", send(message_id="bad id!"), INVALID,
     ["message_id='bad id!'"]),
    ("long message id", send(message_id="m" * 129), INVALID,
     ["message_id='mmm", "129"]),
    ("batch: bad topic in 2nd",
     batch(GOOD, TimerClient.request("", b"x", delay_ms=1, message_id=ID)),
     INVALID, ["messages[1].topic=''"]),
    ("batch: no time in 2nd",
     batch(GOOD, pb.SendRequest(topic="badcheck", message_id=ID)),
     INVALID, ["messages[1].when=None"]),
    ("batch: past the cap in 2nd",
     batch(GOOD, TimerClient.request("badcheck", delay_level=42, message_id=ID)),
     INVALID, ["messages[1].delay_level=42"]),
    ("batch: bad if_exists in 2nd",
     batch(GOOD, pb.SendRequest(topic="badcheck", delay_ms=1, message_id=ID, if_exists=7)),
     INVALID, ["messages[1].if_exists=7", "0..2"]),
    ("batch: bad repeat policy in 2nd",
     batch(GOOD, pb.SendRequest(topic="badcheck", message_id=ID,
                                repeat=pb.Repeat(every_ms=60_000, missed=9))),
     INVALID, ["messages[1].repeat.missed=9", "0..1"]),
    ("get unknown id", lambda c: c.get("nope-1"), NOT_FOUND, ["message_id='nope-1'"]),
    ("get illegal id", lambda c: c.get("a b"), INVALID, ["message_id='a b'"]),
    ("get empty id", lambda c: c.get(""), INVALID, ["message_id=''", "empty"]),
    ("cancel unknown id", lambda c: c.cancel("nope-2"), NOT_FOUND,
     ["message_id='nope-2'"]),
    ("cancel illegal id", lambda c: c.cancel("x" * 200), INVALID,
     ["message_id='xxx", "200"]),
    ("list malformed page token", lambda c: c.list("badcheck", page_token="!!*"),
     INVALID, ["page_token='!!*'"]),
    ("list foreign page token", lambda c: c.list("badcheck", page_token="AAAA"),
     INVALID, ["page_token='AAAA'"]),
    ("list bad topic", lambda c: c.list("no spaces"), INVALID,
     ["topic='no spaces'"]),
    ("list limit", lambda c: c.list("badcheck", limit=1001), INVALID,
     ["limit=1001"]),
    ("list negative from", lambda c: c.list("badcheck", from_ms=-1), INVALID,
     ["from_ms=-1"]),
    ("list empty range", lambda c: c.list("badcheck", from_ms=100, to_ms=50),
     INVALID, ["to_ms=50"]),
    ("ack bad id", lambda c: c.ack("badcheck", ["fine-id", "bad id"]), INVALID,
     ["message_ids[1]='bad id'"]),
    ("ack bad topic", lambda c: c.ack("", ["fine-id"]), INVALID, ["topic=''"]),
    ("subscribe bad topic", subscribe("x y"), INVALID, ["topic='x y'"]),
    ("subscribe negative max_in_flight", subscribe("t", -1), INVALID,
     ["max_in_flight=-1"]),
    ("subscribe huge max_in_flight", subscribe("t", 100_001), INVALID,
     ["max_in_flight=100001", "100000"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("call", "code", "fragments"),
    [pytest.param(*case[1:], id=case[0]) for case in CASES],
)
def test_bad_input_is_refused_naming_field_and_value_and_stores_nothing(
    client, call, code, fragments
):
    error = status_of(lambda: call(client))
    assert error.code == code, error
    for fragment in fragments:
        assert fragment in error.details, f"{fragment!r} not in {error.details!r}"

    for message_id in (ID, "batch-ok"):
        assert status_of(lambda m=message_id: client.get(m)).code == NOT_FOUND
    assert client.list("badcheck") == ([], "")
    keys = client.stats().column_family_keys
    stored = {f: keys[f] for f in ("messages", "wheel_second", "wheel_minute", "wheel_hour")}
    assert stored == dict.fromkeys(stored, 0)
    assert keys["ready"] == 0


def test_refused_call_leaves_the_server_working(client):
    assert status_of(lambda: client.send("", b"x", delay_ms=1)).code == INVALID
    result = client.send("badcheck", b"x", delay_ms=60_000)
    assert client.get(result.message_id).body == b"x"


class _Context:
    """Just enough of grpc.ServicerContext: abort records the status and raises."""

    def __init__(self) -> None:
        self.status: tuple[grpc.StatusCode, str] | None = None
        self.trailers: tuple = ()

    def set_trailing_metadata(self, metadata) -> None:
        self.trailers = tuple(metadata)

    def abort(self, code: grpc.StatusCode, details: str) -> None:
        self.status = (code, details)
        raise RuntimeError("aborted")


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (InvalidArgument("topic", "a b", "bad"), INVALID),
        (NotFound("message_id='x': no such timer"), NOT_FOUND),
        (AlreadyExists("message_id='x': taken"), grpc.StatusCode.ALREADY_EXISTS),
        (FailedPrecondition("message_id='x': already FIRED"), grpc.StatusCode.FAILED_PRECONDITION),
        (ExportError("output dir '/x' exists"), grpc.StatusCode.FAILED_PRECONDITION),
        (Overloaded("writer queue holds 9 operations"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (ShuttingDown("the timer engine is shutting down"), grpc.StatusCode.UNAVAILABLE),
        (DiskFull("disk full: /data: No space left on device"), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (AdmissionRefused("fire_lag_ms=40: ...", 20), grpc.StatusCode.RESOURCE_EXHAUSTED),
        (StoreUnavailable("the store is being reopened; retry"), grpc.StatusCode.UNAVAILABLE),
        (KeyError("a bug"), grpc.StatusCode.INTERNAL),
    ],
)
def test_every_error_maps_to_its_status_code_with_its_message(error, code):
    context = _Context()
    with pytest.raises(RuntimeError, match="aborted"), rpc_errors(context, "Send"):
        raise error
    assert context.status is not None and context.status[0] == code
    if code is grpc.StatusCode.INTERNAL:
        assert context.status[1] == "Send failed: KeyError"  # no internals leak
    else:
        assert context.status[1] == str(error)
    # Only the refusal that stored nothing says when to send again (timerwheel/retries.py)
    if isinstance(error, AdmissionRefused):
        assert context.trailers == ((RETRY_AFTER_KEY, "20"),)
    else:
        assert context.trailers == ()


def test_a_split_batch_part_refused_at_the_door_does_not_mark_the_whole_call():
    """Another part of the batch may be stored: the call's answer must carry no marker."""
    context = _Context()
    with pytest.raises(_PartFailed), rpc_errors(_PartContext(context), "SendBatch"):
        raise AdmissionRefused("fire_lag_ms=40: ...", 20)
    assert context.trailers == () and context.status is None


def test_refusals_are_logged_once_a_second_per_method_and_kind_with_the_rest_counted():
    now = [100.0]
    refusals = RefusalLog(interval_s=1.0, clock=lambda: now[0])
    full = DiskFull("disk full: /data: No space left on device")
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    with capture_logs() as logs:
        for _ in range(50):
            refusals.warn("Send", exhausted, full)
        refusals.warn("SendBatch", exhausted, full)  # another method: its own line
        refusals.warn("Send", exhausted, Overloaded("writer queue full"))  # another kind
        now[0] += 0.999
        refusals.warn("Send", exhausted, full)
        now[0] += 0.001
        refusals.warn("Send", exhausted, full)
    lines = [(e["method"], e["error"][:9], e["suppressed"]) for e in logs]
    assert lines == [
        ("Send", "disk full", 0), ("SendBatch", "disk full", 0), ("Send", "writer qu", 0),
        ("Send", "disk full", 50),
    ]  # fmt: skip
