"""Recurring series over real gRPC: occurrences with their own ids and times, Get shows
the next one, Cancel stops it, and every bad repeat is refused naming the field."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.time_of_day import wall_ms

from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import Repeat
from timerwheel.wheels.recurrence import next_after

pytestmark = pytest.mark.wallclock


def test_a_series_delivers_each_occurrence_once_with_its_own_id_and_time(client, collectors):
    collector = Collector(client, "ticks")
    collectors.append(collector)
    start = wall_ms() + 300
    sent = client.send(
        "ticks", b"tick", deliver_at_ms=start, message_id="every-200",
        repeat=pb.Repeat(every_ms=200, max_count=3), properties={"k": "v"},
    )  # fmt: skip
    assert (sent.message_id, sent.deliver_at_ms) == ("every-200", start)
    pending = client.get("every-200")
    assert (pending.next_occurrence, pending.repeat.every_ms, pending.repeat.max_count) == (
        1,
        200,
        3,
    )
    assert client.count("ticks").pending == 1

    deliveries = collector.wait_count(3)
    assert [d.message_id for d in deliveries] == ["every-200#1", "every-200#2", "every-200#3"]
    assert [d.deliver_at_ms for d in deliveries] == [start, start + 200, start + 400]
    assert all(d.fired_at_ms >= d.deliver_at_ms for d in deliveries)
    assert dict(deliveries[1].properties) == {
        "k": "v", "timerwheel.series.id": "every-200", "timerwheel.series.occurrence": "2",
    }  # fmt: skip
    assert not collector.wait_for(lambda c: len(c.deliveries) > 3, timeout_s=0.6)
    assert client.get("every-200").state == pb.ACKED  # done after max_count
    assert client.get("every-200#2").state == pb.ACKED  # each occurrence is a message
    assert client.count("ticks").pending == 0


def test_cancel_stops_a_series_and_get_shows_the_next_occurrence(client, collectors):
    collector = Collector(client, "daily")
    collectors.append(collector)
    client.send("daily", b"x", message_id="fast", repeat=pb.Repeat(every_ms=150))  # from now
    collector.wait_count(2)
    series = client.get("fast")
    assert series.state == pb.SCHEDULED and series.next_occurrence >= 3
    assert client.cancel("fast") == pb.CANCELLED
    seen = len(collector.wait_count(series.next_occurrence - 1))
    assert not collector.wait_for(lambda c: len(c.deliveries) > seen, timeout_s=0.6)

    cron = client.send(
        "daily", b"x", message_id="five-am",
        repeat=pb.Repeat(cron="0 5 * * *", time_zone="Europe/Paris"),
    )  # fmt: skip
    assert cron.deliver_at_ms > wall_ms()
    stored = client.get("five-am")
    assert (stored.repeat.cron, stored.repeat.time_zone) == ("0 5 * * *", "Europe/Paris")
    assert stored.next_occurrence == 1 and stored.deliver_at_ms == cron.deliver_at_ms
    moved = client.reschedule("five-am", delay_ms=200)  # the next occurrence moves
    assert collector.wait_for(lambda c: "five-am#1" in c.ids())
    [first] = [d for d, _ in collector.deliveries if d.message_id == "five-am#1"]
    assert first.deliver_at_ms == moved
    after = client.get("five-am")  # the next 05:00 in Paris after the moved occurrence
    repeat = Repeat(cron="0 5 * * *", time_zone="Europe/Paris")
    assert (after.deliver_at_ms, after.next_occurrence) == (next_after(repeat, moved), 2)


def test_bad_repeats_are_refused_naming_field_and_value(client):
    now = wall_ms()
    cases = [
        (pb.Repeat(cron="61 * * * *"), "repeat.cron='61 * * * *'"),
        (pb.Repeat(cron="every day"), "repeat.cron='every day'"),
        (pb.Repeat(every_ms=0), "repeat.every_ms=0"),
        (pb.Repeat(every_ms=-5), "repeat.every_ms=-5"),
        (pb.Repeat(every_ms=100, cron="* * * * *"), "not both"),
        (pb.Repeat(cron="* * * * *", time_zone="Mars/Base"), "repeat.time_zone='Mars/Base'"),
        (pb.Repeat(every_ms=100, time_zone="UTC"), "repeat.time_zone='UTC'"),
        (pb.Repeat(every_ms=100, max_count=-1), "repeat.max_count=-1"),
        (pb.Repeat(every_ms=100, end_at_ms=now - 1), f"repeat.end_at_ms={now - 1}"),
    ]
    for repeat, fragment in cases:
        error = status_of(
            lambda r=repeat: client.send("bad", b"x", message_id="r-1", repeat=r, delay_ms=1_000)
        )
        assert error.code == grpc.StatusCode.INVALID_ARGUMENT, (repeat, error)
        assert fragment in error.details, error.details
    assert status_of(lambda: client.get("r-1")).code == grpc.StatusCode.NOT_FOUND
    assert client.count("bad").pending == 0
