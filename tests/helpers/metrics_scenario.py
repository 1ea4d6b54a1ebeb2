"""Scraping a server's /metrics, and the scenario both metrics tests run (one process:
tests/observability/test_metrics.py; --workers 2: test_metrics_workers.py)."""

from __future__ import annotations

import time
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from helpers.streams import Collector
from helpers.waits import WAIT_S
from timerwheel.client import RemoteError, TimerClient
from timerwheel.observability import thread_cpu

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
    assert value(after, "timerwheel_admission_refusing") == 0  # a light load is admitted
    assert 0 <= value(after, "timerwheel_admission_due_load_percent") < 85
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
