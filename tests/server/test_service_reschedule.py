"""Reschedule and replace-on-send (debounce) over real gRPC, with their refusals."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.time_of_day import wall_ms

from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = pytest.mark.wallclock

REPLACE, KEEP = pb.IF_EXISTS_REPLACE, pb.IF_EXISTS_KEEP


def test_reschedule_moves_a_pending_timer_and_it_fires_once_at_the_new_time(client, collectors):
    collector = Collector(client, "moved")
    collectors.append(collector)
    sent = client.send("moved", b"x", delay_ms=600_000)
    asked_at = wall_ms()
    new_at = client.reschedule(sent.message_id, delay_ms=300)
    assert asked_at + 300 <= new_at <= wall_ms() + 300
    assert client.get(sent.message_id).deliver_at_ms == new_at

    [delivery] = collector.wait_count(1)
    assert (delivery.message_id, delivery.deliver_at_ms) == (sent.message_id, new_at)
    assert delivery.fired_at_ms >= new_at
    assert client.list("moved") == ([], "")  # the old wheel key is gone with the move

    later = client.send("moved", b"y", delay_ms=1_000)
    assert client.reschedule(later.message_id, deliver_at_ms=later.deliver_at_ms + 3_600_000)
    moved = client.get(later.message_id)
    assert moved.deliver_at_ms == later.deliver_at_ms + 3_600_000
    assert moved.wheel in ("minute", "hour")


def test_reschedule_refusals_name_the_state_or_field(client, collectors):
    collector = Collector(client, "gone")
    collectors.append(collector)
    fired = client.send("gone", b"x", delay_ms=0).message_id
    collector.wait_count(1)  # auto-acked
    error = status_of(lambda: client.reschedule(fired, delay_ms=1_000))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "ACKED" in error.details

    cancelled = client.send("gone", b"x", delay_ms=60_000).message_id
    client.cancel(cancelled)
    error = status_of(lambda: client.reschedule(cancelled, delay_ms=1_000))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "CANCELLED" in error.details

    error = status_of(lambda: client.reschedule("nope-7", delay_ms=1_000))
    assert error.code == grpc.StatusCode.NOT_FOUND and "message_id='nope-7'" in error.details

    pending = client.send("gone", b"x", delay_ms=60_000)
    for when, fragment in (({}, "when=None"), ({"delay_ms": -5}, "delay_ms=-5"),
                           ({"delay_level": 99}, "delay_level=99")):  # fmt: skip
        error = status_of(lambda w=when: client.reschedule(pending.message_id, **w))
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT and fragment in error.details
    assert client.get(pending.message_id).deliver_at_ms == pending.deliver_at_ms  # unchanged


def test_replace_debounces_and_the_new_body_is_delivered_once(client, collectors):
    collector = Collector(client, "debounce")
    collectors.append(collector)
    first = client.send("debounce", b"v1", delay_ms=600_000, message_id="deb-1")
    second = client.send(
        "debounce", b"v2", delay_ms=400, message_id="deb-1", properties={"n": "2"},
        if_exists=REPLACE,
    )  # fmt: skip
    assert second.message_id == "deb-1" and second.deliver_at_ms < first.deliver_at_ms
    kept = client.send("debounce", b"v3", delay_ms=5, message_id="deb-1", if_exists=KEEP)
    # KEEP answers the existing timer and changes nothing (and says it existed)
    assert kept[:2] == second[:2] and kept.existed

    [delivery] = collector.wait_count(1)
    assert (delivery.body, dict(delivery.properties)) == (b"v2", {"n": "2"})
    assert delivery.deliver_at_ms == second.deliver_at_ms
    assert not collector.wait_for(lambda c: len(c.deliveries) > 1, timeout_s=0.5)

    error = status_of(
        lambda: client.send("debounce", b"v4", delay_ms=5, message_id="deb-1", if_exists=REPLACE)
    )
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION and "ACKED" in error.details
    kept = client.send("debounce", b"v4", delay_ms=5, message_id="deb-1", if_exists=KEEP)
    assert kept[:2] == second[:2] and kept.existed
    error = status_of(lambda: client.send("debounce", b"v5", delay_ms=5, if_exists=REPLACE))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert "if_exists='REPLACE'" in error.details
