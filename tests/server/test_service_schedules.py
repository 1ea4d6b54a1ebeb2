"""Schedules over real gRPC on loopback (issue 78, "Schedules"): PauseSeries and
ResumeSeries with their answers, refusals and roles; a cancelled series id sent again
with REPLACE; the catch-up fields of `repeat` carried and checked; the first send time
kept in the trace through a REPLACE. What the writer does in time (skipped occurrences,
catch-up) is tested in virtual time: tests/engine/test_engine_schedules.py."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from helpers.calls import status_of
from helpers.credentials import write_tokens
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.aio import AsyncClient
from timerwheel.client import TimerClient
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb

HOUR_MS = 3_600_000
REPLACE = pb.IF_EXISTS_REPLACE
DENIED = grpc.StatusCode.PERMISSION_DENIED


def test_pause_and_resume_answer_what_changed_and_get_shows_it(client):
    sent = client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="hourly",
                       repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
    paused = client.pause_series("hourly")
    assert (paused.changed, paused.deliver_at_ms) == (True, sent.deliver_at_ms)
    assert client.pause_series("hourly").changed is False
    info = client.get("hourly", include_trace=True)
    assert info.paused and info.state == pb.SCHEDULED and info.next_occurrence == 1
    assert [e.kind for e in info.trace][-1] == pb.TRACE_PAUSED

    resumed = client.resume_series("hourly")
    assert (resumed.changed, resumed.deliver_at_ms) == (True, sent.deliver_at_ms)
    assert client.resume_series("hourly").changed is False
    info = client.get("hourly", include_trace=True)
    assert not info.paused
    assert [e.kind for e in info.trace][-2:] == [pb.TRACE_PAUSED, pb.TRACE_RESUMED]


@pytest.mark.wallclock
def test_a_paused_series_delivers_nothing_until_it_is_resumed(client, collectors):
    collector = Collector(client, "ticks")
    collectors.append(collector)
    client.send("ticks", b"t", message_id="fast", repeat=pb.Repeat(every_ms=100))
    collector.wait_count(1)
    client.pause_series("fast")
    number = client.get("fast").next_occurrence
    first_skip = client.get("fast").deliver_at_ms

    # the writer reaches the paused series at its times and moves it on, firing nothing
    assert _until(lambda: client.get("fast").deliver_at_ms >= first_skip + 300)
    assert client.get("fast").next_occurrence == number
    assert f"fast#{number}" not in collector.ids()

    client.resume_series("fast")
    assert collector.wait_for(lambda c: f"fast#{number}" in c.ids())
    client.cancel("fast")


def test_pause_refusals_name_the_series_and_why(client):
    client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="plain")
    for call, code, fragment in [
        (lambda: client.pause_series("plain"), grpc.StatusCode.FAILED_PRECONDITION,
         "not a recurring series"),
        (lambda: client.resume_series("nobody"), grpc.StatusCode.NOT_FOUND,
         "series_id='nobody': no such timer"),
        (lambda: client.pause_series(""), grpc.StatusCode.INVALID_ARGUMENT, "series_id=''"),
    ]:  # fmt: skip
        error = status_of(call)
        assert error.code == code and fragment in error.details, error.details
    client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="stopped",
                repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
    client.cancel("stopped")
    error = status_of(lambda: client.pause_series("stopped"))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert "already CANCELLED" in error.details and "REPLACE" in error.details


def test_a_cancelled_series_is_sent_again_with_replace(client):
    repeat = pb.Repeat(every_ms=HOUR_MS)
    client.send("jobs", b"v1", delay_ms=HOUR_MS, message_id="nightly", repeat=repeat)
    first_sent = client.get("nightly").created_at_ms
    assert client.cancel("nightly") == pb.CANCELLED
    error = status_of(lambda: client.send("jobs", b"v2", delay_ms=HOUR_MS, message_id="nightly",
                                          repeat=repeat))  # fmt: skip
    assert error.code == grpc.StatusCode.ALREADY_EXISTS  # REJECT: as before
    again = client.send("jobs", b"v2", delay_ms=HOUR_MS, message_id="nightly", repeat=repeat,
                        if_exists=REPLACE)  # fmt: skip
    assert not again.existed
    info = client.get("nightly", include_trace=True)
    assert (info.state, info.body) == (pb.SCHEDULED, b"v2")
    kinds = [(e.kind, e.at_ms) for e in info.trace]
    assert kinds[0] == (pb.TRACE_SENT, first_sent)  # the first send time is kept
    assert [k for k, _ in kinds] == [pb.TRACE_SENT, pb.TRACE_CANCELLED, pb.TRACE_REPLACED,
                                     pb.TRACE_SENT]  # fmt: skip
    # an ACKED or FIRED id is still not replaced: it was delivered
    client.send("jobs", b"now", delay_ms=0, message_id="done")
    error = status_of(lambda: client.send("jobs", b"again", delay_ms=0, message_id="done",
                                          if_exists=REPLACE))  # fmt: skip
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "FIRED" in error.details


def test_the_catch_up_fields_are_stored_shown_and_checked(client):
    repeat = pb.Repeat(every_ms=HOUR_MS, missed=pb.MISSED_FIRE_EACH, catch_up_window_ms=600_000,
                       max_catch_up=3)  # fmt: skip
    client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="bounded", repeat=repeat)
    shown = client.get("bounded").repeat
    assert (shown.catch_up_window_ms, shown.max_catch_up) == (600_000, 3)
    for bad, fragment in [
        (pb.Repeat(every_ms=HOUR_MS, max_catch_up=2), "repeat.max_catch_up=2"),
        (pb.Repeat(every_ms=HOUR_MS, catch_up_window_ms=10), "repeat.catch_up_window_ms=10"),
    ]:  # fmt: skip
        error = status_of(lambda b=bad: client.send("jobs", b"x", delay_ms=HOUR_MS,
                                                    message_id="bad", repeat=b))  # fmt: skip
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT and fragment in error.details


def test_the_async_client_pauses_and_resumes(server, client):
    client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="aio",
                repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip

    async def run() -> tuple[bool, bool]:
        async with AsyncClient(server.target, timeout_s=WAIT_S) as aio:
            paused = await aio.pause_series("aio")
            resumed = await aio.resume_series("aio")
            return paused.changed, resumed.changed

    assert asyncio.run(run()) == (True, True)


# == roles =============================================================================
@pytest.fixture
def tokened(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    server = make_server(security=SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml")))
    clients: list[TimerClient] = []

    def connect(name: str) -> TimerClient:
        clients.append(TimerClient(server.target, timeout_s=WAIT_S, token=tokens[name]))
        return clients[-1]

    try:
        yield connect
    finally:
        for made in clients:
            made.close()


ALLOWED = {"producer": True, "orders-producer": True, "consumer": False,
           "orders-consumer": False, "admin": True}  # fmt: skip


@pytest.mark.parametrize("role", list(ALLOWED))
def test_each_role_cell_of_pause_and_resume(tokened, role):
    admin, caller = tokened("admin"), tokened(role)
    admin.send("orders.eu", b"x", delay_ms=HOUR_MS, message_id="s1",
               repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
    if ALLOWED[role]:
        assert caller.pause_series("s1").changed and admin.get("s1").paused
        assert caller.resume_series("s1").changed and not admin.get("s1").paused
        return
    for call in (caller.pause_series, caller.resume_series):
        error = status_of(lambda c=call: c("s1"))
        assert error.code == DENIED and "Series" in error.details
    assert not admin.get("s1").paused, "a refused call changes nothing"


def test_a_topic_limited_producer_cannot_pause_another_topics_series(tokened):
    admin, producer = tokened("admin"), tokened("orders-producer")
    admin.send("payments", b"x", delay_ms=HOUR_MS, message_id="pay",
               repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
    error = status_of(lambda: producer.pause_series("pay"))
    # the same answer an unknown id gets: nothing about other topics leaks
    assert error.code == grpc.StatusCode.NOT_FOUND
    assert error.details == "series_id='pay': no such timer"
    assert not admin.get("pay").paused


def _until(condition, timeout_s: float = WAIT_S) -> bool:
    """Poll `condition` (a read of the server's state) until it holds or time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()
