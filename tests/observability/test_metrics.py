"""Prometheus metrics of one server process, scraped over HTTP and parsed with
prometheus_client's parser: every counter, histogram and gauge moves by what a small
scenario did (sends, a cascaded timer, fires, deliveries, a nack's redelivery, acks, a
cancel and a refused send)."""

from __future__ import annotations

import pytest
from helpers.metrics_scenario import (
    clock_offset_to_second,
    poll,
    run_scenario,
    scrape,
    value,
)
from helpers.waits import WAIT_S
from prometheus_client import Histogram

from timerwheel.client import TimerClient
from timerwheel.observability.metrics import _observe_many
from timerwheel.wheels.settings import MINUTE_MS, Settings, SettingsError

pytestmark = pytest.mark.wallclock


def test_metrics_move_by_what_a_scenario_did(make_server):
    offset = clock_offset_to_second(56)
    server = make_server(
        metrics_port=0,
        minute_cascade_lead_ms=1_000,
        clock_offset_ms=offset,
        first_delivery_hold_ms=MINUTE_MS,  # no first delivery's hold ends before its Ack
    )
    assert server.metrics is not None
    run_scenario(server.target, server.metrics.port, offset)


def test_each_wal_sync_is_counted_and_timed(make_server):
    server = make_server(metrics_port=0, sync_writes=True)
    port = server.metrics.port
    before = scrape(port)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        for _ in range(3):  # one after another: each answered only after its own fsync
            client.send("synced", b"x", delay_ms=60_000)
    after = scrape(port)

    def moved(name: str) -> float:
        return value(after, name) - value(before, name)

    syncs = moved("timerwheel_wal_syncs_total")
    assert syncs >= 3
    assert moved("timerwheel_wal_sync_duration_seconds_count") == syncs
    assert moved("timerwheel_wal_sync_duration_seconds_sum") > 0


def test_metrics_are_off_by_default(make_server):
    assert make_server().metrics is None


def test_fired_unacked_keeps_the_top_topics_and_sums_the_rest(make_server):
    server = make_server(metrics_port=0, metrics_top_topics=2)
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        for topic, count in (("a", 3), ("b", 2), ("c", 1), ("d", 1)):
            client.send_batch([TimerClient.request(topic, b"x", delay_ms=0) for _ in range(count)])
    samples = poll(
        server.metrics.port,
        lambda s: sum(v for (n, _), v in s.items() if n == "timerwheel_fired_unacked") == 7,
    )
    by_topic = {
        dict(labels)["topic"]: v for (n, labels), v in samples.items()
        if n == "timerwheel_fired_unacked"
    }  # fmt: skip
    assert by_topic == {"a": 3, "b": 2, "other": 2}


def test_observe_many_matches_observe_one_by_one():
    values = [0.0005, 0.001, 0.003, 0.2, 0.2, 7.0, 100.0]
    one, many = (Histogram(name, "t", registry=None) for name in ("one", "many"))
    for v in values:
        one.observe(v)
    _observe_many(many, values)
    assert [s.value for s in one.collect()[0].samples if s.name != "one_created"] == [
        s.value for s in many.collect()[0].samples if s.name != "many_created"
    ]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"metrics_port": -2}, "metrics_port=-2"),
        ({"metrics_port": 70000}, "metrics_port=70000"),
        ({"metrics_port": 7070, "port": 7070}, "metrics_port=7070: is the gRPC port"),
        ({"metrics_top_topics": 0}, "metrics_top_topics=0"),
        ({"metrics_host": ""}, "metrics_host=''"),
    ],
)
def test_bad_metrics_settings_are_refused_showing_the_value(changes, message):
    with pytest.raises(SettingsError, match=message):
        Settings(**changes)
