"""Prometheus metrics of one server process, scraped over HTTP and parsed with
prometheus_client's parser: every counter, histogram and gauge moves by what a small
scenario did (sends, a cascaded timer, fires, deliveries, a nack's redelivery, acks, a
cancel and a refused send)."""

from __future__ import annotations

import time
import urllib.request

import pytest
from conftest import WAIT_S, Collector
from prometheus_client import Histogram
from prometheus_client.parser import text_string_to_metric_families
from timerwheel.observability import thread_cpu
from timerwheel.observability.metrics import _observe_many
from timerwheel.wheels.settings import MINUTE_MS, Settings, SettingsError

from timerwheel.client import RemoteError, TimerClient

pytestmark = pytest.mark.wallclock

Samples = dict[tuple[str, frozenset], float]


def scrape(port: int) -> Samples:
    """Every sample of /metrics, by (sample name, labels)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=WAIT_S) as answer:
        text = answer.read().decode()
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def poll(port: int, condition, timeout_s: float = WAIT_S) -> Samples:
    """Scrape until `condition(samples)` holds; the last scrape on timeout (then it fails)."""
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(port)
        if condition(samples) or time.monotonic() > deadline:
            return samples
        time.sleep(0.05)  # pacing of a poll loop with a deadline, not synchronisation


COUNTERS = ("sends", "fires", "deliveries", "redeliveries", "acks", "cancels")


def deltas(before: Samples, after: Samples) -> dict[str, float]:
    names = {f"timerwheel_{name}_total": name for name in COUNTERS}
    names.update({
        "timerwheel_fire_lateness_seconds_count": "fire_lateness",
        "timerwheel_delivery_lateness_seconds_count": "delivery_lateness",
        "timerwheel_group_commit_ops_sum": "commit_ops",
    })  # fmt: skip
    result = {short: value(after, name) - value(before, name) for name, short in names.items()}
    refused = {"method": "Send", "code": "INVALID_ARGUMENT"}
    result["refused"] = value(after, "timerwheel_refusals_total", **refused) - value(
        before, "timerwheel_refusals_total", **refused
    )
    return result


def run_scenario(target: str, port: int, clock_offset_ms: int) -> None:
    """The scenario both modes run; asserts every metric moved by what it did."""
    with TimerClient(target, timeout_s=WAIT_S) as client:
        before = scrape(port)
        collector = Collector(client, "m", auto_ack=False)
        try:
            poll(port, lambda s: value(s, "timerwheel_subscribers") == 1)
            fired_now = [client.send("m", b"now", delay_ms=0).message_id for _ in range(3)]
            # Due just after the next minute boundary: it waits in the minute wheel and is
            # cascaded to the second wheel before it fires.
            due_ms = next_minute_ms(clock_offset_ms) + 500
            cascaded = client.send("m", b"c", deliver_at_ms=due_ms).message_id
            assert client.get(cascaded).wheel != "second"
            client.send("m", b"stays", delay_ms=5 * 60_000)
            cancelled = client.send("m", b"x", delay_ms=30 * 60_000).message_id
            assert client.cancel(cancelled).name == "CANCELLED"
            with pytest.raises(RemoteError) as refused:
                client.send("", b"no topic", delay_ms=0)
            assert refused.value.code.name == "INVALID_ARGUMENT"

            collector.wait_count(4, timeout_s=WAIT_S + 60)
            ids = [*fired_now, cascaded]
            assert sorted(collector.ids()) == sorted(ids)
            middle = scrape(port)
            assert value(middle, "timerwheel_fired_unacked", topic="m") == 4
            assert value(middle, "timerwheel_timers_due", within="60m") == 1
            assert value(middle, "timerwheel_timers_due", within="10m") == 1
            assert value(middle, "timerwheel_timers_due", within="1m") == 0

            assert client.nack("m", [fired_now[0]]).nacked == 1
            collector.wait_count(5)
            assert client.ack("m", ids) == 4
        finally:
            collector.stop()
    after = poll(
        port,
        lambda s: (
            value(s, "timerwheel_acks_total") - value(before, "timerwheel_acks_total") >= 4
            and value(s, "timerwheel_subscribers") == 0
        ),
    )
    assert deltas(before, after) == {
        "sends": 6, "fires": 4, "deliveries": 5, "redeliveries": 1, "acks": 4, "cancels": 1,
        "fire_lateness": 4, "delivery_lateness": 4, "refused": 1,
        # sends, the cancel, the acks (the refused send never queued), and the trace's
        # delivery events: the nacked message's first delivery (handed over by its nack),
        # the nack and the redelivery. The other three first deliveries ride with the Ack
        # (timerwheel.delivery.first_deliveries): they are no op of their own.
        "commit_ops": 6 + 1 + 4 + 3,
    }  # fmt: skip
    assert value(after, "timerwheel_fired_unacked", topic="m") == 0
    assert value(after, "timerwheel_writer_up") == 1
    assert value(after, "timerwheel_writer_queue_ops") == 0
    assert value(after, "timerwheel_data_dir_free_bytes") > 0
    cascades = "timerwheel_cascade_chunk_duration_seconds_count"
    assert value(after, cascades, wheel="minute") > value(before, cascades, wheel="minute")
    for name in ("rocksdb_live_data_bytes", "rocksdb_pending_compaction_bytes"):
        assert (f"timerwheel_{name}", frozenset()) in after
    threads = "timerwheel_thread_cpu_seconds_total"  # the engine process's, by kind
    assert {labels for name, labels in after if name == threads} == {
        frozenset({("thread", kind)}) for kind in thread_cpu.KINDS
    }
    assert value(after, threads, thread="writer") >= value(before, threads, thread="writer")
    assert sum(v for (name, _), v in after.items() if name == threads) > 0


def clock_offset_to_second(second: int) -> int:
    """An offset putting the server's clock (when it starts) at `second` of a minute, so
    that the next minute boundary, where the scenario's cascaded timer is due, comes soon.
    From the real clock: the offset replaces the one a time-of-day pin would give (with
    the pin's, the server started at any second and the timer could come after the 30 s
    ack timeout, so the fired messages were delivered twice)."""
    return (second * 1000 - time.time_ns() // 1_000_000 % 60_000) % 60_000


def next_minute_ms(offset_ms: int) -> int:
    """The first minute boundary of the server's clock that its minute cascade (lead 1 s)
    has not started yet: a timer due then waits in an upper wheel and is cascaded."""
    server_now = time.time_ns() // 1_000_000 + offset_ms + 2_000
    return server_now - server_now % 60_000 + 60_000


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
