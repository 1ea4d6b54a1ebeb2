"""bench/engine_virtual.py: `steady` and `burst`, run small by `bench.engine_bench`. steady:
the shape it claims (a SendBatch every 20 ms, one fire commit a fire tick, an ack every 10
ms, each its own group commit) and that every message sent in the window is acked in it once
the fires have caught up, with the retention sweep running beside them. burst: every timer
of the window fired, fetched and acked, one writer iteration a tick, `--set` applied, and
with `--delivery-traces` each delivery stored in the trace as the delivery process stores
it."""

from __future__ import annotations

import pytest
from helpers.bench_runs import bench_figures, run_bench

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: a spawned `python -m bench.*`


def test_steady_runs_tdmqs_shape_and_acks_at_the_send_rate():
    figures = engine_bench(
        "steady", "--rate", "500", "--min-delay-s", "1", "--max-delay-s", "2",
        "--warmup-s", "3", "--measure-s", "4", "--retention-s", "2", "--no-sync",
    )  # fmt: skip
    assert figures["bench"] == "steady" and figures["fire_tick_ms"] == 4
    assert figures["retention_ms"] == 2_000  # shorter than the warm-up: sweeping measured
    # 250 fire commits (one a 4 ms tick) + 50 SendBatches + 100 acks a second, give or
    # take one at the window's edges
    assert abs(figures["group_commits_per_s"] - 400) <= 2
    # after the warm-up the fires run at the send rate: the window acks what it sends
    assert abs(figures["messages_acked"] - 500 * 4) <= 100
    assert figures["cpu_us_per_message"] > 0 and figures["cpu_percent_of_a_core"] > 0


def engine_bench(*flags: str) -> dict:
    return bench_figures("engine_bench", *flags)


def test_burst_fires_delivers_and_acks_every_timer_of_the_window():
    figures = engine_bench("burst", "--timers", "3000", "--in-flight", "1000", "--no-sync")
    assert figures["bench"] == "burst" and figures["timers"] == 3_000
    # due over one second; a fire chunk a 4 ms tick keeps up, so the last is acked
    # in the tick its second ends
    assert 0.9 <= figures["virtual_s_until_all_acked"] <= 1.0
    parts = figures["cpu_s_by_part"]
    assert all(seconds > 0 for seconds in parts.values())
    assert figures["cpu_s"] == pytest.approx(sum(parts.values()), abs=0.02)


def test_burst_fires_at_most_a_chunk_a_group_commit_with_the_settings_given():
    # One timer a fire chunk, and a tick has two group commits that fire (the writer's
    # step and the ack call's commit): 600 timers take 300 to 600 ticks of 4 ms.
    figures = engine_bench("burst", "--timers", "600", "--no-sync", "--set", "fire_chunk=1")
    assert 1.2 <= figures["virtual_s_until_all_acked"] <= 2.4
    first = engine_bench("burst", "--timers", "300", "--no-sync", "--fire-first")
    assert first["fire_first"] and first["virtual_s_until_all_acked"] >= 1.0


def test_burst_stores_a_delivered_event_a_message_with_delivery_traces():
    plain = engine_bench("burst", "--timers", "300", "--no-sync")
    traced = engine_bench("burst", "--timers", "300", "--no-sync", "--delivery-traces")
    assert not plain["delivery_traces"] and traced["delivery_traces"]
    assert "DELIVERED" not in plain["last_trace"]
    assert traced["last_trace"] == [*plain["last_trace"][:-1], "DELIVERED", "ACKED"]


@pytest.mark.parametrize(
    ("assignment", "named"),
    [("fire_chunk=0", "fire_chunk=0"), ("fire_chunk=x", "fire_chunk"), ("nope=1", "'nope'")],
)
def test_a_bad_set_is_a_usage_error_naming_it(assignment, named):
    done = run_bench("engine_bench", "burst", "--set", assignment)
    assert done.returncode == 2
    assert named in done.stderr and "Traceback" not in done.stderr
