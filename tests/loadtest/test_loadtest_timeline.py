"""The server's CPU placed in time: the Stats sampler (whole server and by kind of
thread), the per-second timeline of a run, and the seconds at the one-GIL ceiling."""

from __future__ import annotations

import os
import time

from timerwheel.loadtest.figures import at_ceiling, timeline
from timerwheel.loadtest.server_proc import Sample, StatsSampler, machine_busy_s


def test_server_cpu_by_wall_second_from_consecutive_stats_samples():
    def sample(at_s: float, wall_s: float, cpu_s: float) -> Sample:
        return Sample(at_s, wall_s, cpu_s, rss_bytes=0, data_dir_bytes=0, keys={}, unacked=0)

    sampler = StatsSampler(read=lambda: sample(0.0, 0.0, 0.0))
    sampler.samples = [sample(10.0, 1_000.2, 5.0), sample(11.0, 1_001.2, 5.9),
                       sample(12.0, 1_002.2, 7.2), sample(12.0, 1_002.2, 7.2)]  # fmt: skip
    # intervals centred at 1,000.7 and 1,001.7 s; the empty last interval says nothing
    assert sampler.cpu_percent_by_second() == {1_000: 90.0, 1_001: 130.0}


def test_the_engine_threads_cpu_by_kind_over_a_phase_and_by_second():
    def sample(at_s: float, cpu_s: float, writer_s: float | None) -> Sample:
        threads = {} if writer_s is None else {"writer": writer_s, "grpc_calls": at_s / 10}
        return Sample(at_s, 1_000.2 + at_s, cpu_s, 0, 0, {}, 0, thread_cpu_s=threads)

    sampler = StatsSampler(read=lambda: sample(0.0, 0.0, None))
    sampler.samples = [sample(0.0, 1.0, 0.5), sample(1.0, 2.0, 1.1), sample(2.0, 3.0, 1.9),
                       sample(3.0, 3.5, None)]  # fmt: skip  # a server that stopped reporting
    assert sampler.thread_cpu_percent(0.0, 2.0) == {"writer": 70.0, "grpc_calls": 10.0}
    assert sampler.cpu_percent_by_second(("writer",)) == {1_000: 60.0, 1_001: 80.0}
    both = sampler.cpu_percent_by_second(("writer", "grpc_calls"))  # kinds summed
    assert both == {1_000: 70.0, 1_001: 90.0}
    assert sampler.cpu_percent_by_second(("delivery",)) == {}  # not reported: no figure, not 0
    assert sampler.thread_cpu_percent(2.5, 3.0) == {}  # one sample: no interval


def test_the_machine_cpu_by_second_and_the_busy_seconds_it_is_read_from():
    def sample(at_s: float, busy_s: float | None) -> Sample:
        return Sample(at_s, 1_000.2 + at_s, 0.0, 0, 0, {}, 0, machine_busy_s=busy_s)

    sampler = StatsSampler(read=lambda: sample(0.0, None))
    sampler.samples = [sample(0.0, 50.0), sample(1.0, 51.2), sample(2.0, 53.1),
                       sample(3.0, None)]  # fmt: skip  # the Redis peer's older samples: none
    assert sampler.machine_percent_by_second() == {1_000: 120.0, 1_001: 190.0}
    # read from the kernel (in 10 ms ticks): at least this process's own busy time, at
    # most every core's wall time
    started_s, before = time.monotonic(), machine_busy_s()
    spin_until = time.process_time() + 0.2
    while time.process_time() < spin_until:  # this process keeps one core busy
        pass
    busy_s, wall_s = machine_busy_s() - before, time.monotonic() - started_s
    assert 0.18 <= busy_s <= wall_s * os.cpu_count() + 0.02


def test_timeline_counts_from_the_first_due_second_and_places_the_cpu():
    delay, cpu = {1_002: 9, 1_000: 4, 1_001: 30}, {1_001: 97.5, 1_002: 40.0, 999: 5.0}
    assert timeline(delay, cpu, fire_worst={1_001: 12}) == [
        {"second": 0, "delay_max_ms": 4, "fire_max_ms": 0, "server_cpu_percent": None},
        {"second": 1, "delay_max_ms": 30, "fire_max_ms": 12, "server_cpu_percent": 97.5},
        {"second": 2, "delay_max_ms": 9, "fire_max_ms": 0, "server_cpu_percent": 40.0},
    ]  # fmt: skip
    # without fire lateness (the Redis peer's rows), and nothing received: no rows
    assert timeline(delay, cpu)[1] == {"second": 1, "delay_max_ms": 30, "server_cpu_percent": 97.5}
    assert timeline({}, cpu) == []
    # columns of threads' CPU by second, None where no interval is centred in the second
    rows = timeline(delay, cpu, columns={"writer_cpu_percent": {1_000: 40.0, 1_002: 61.5}})
    assert [row["writer_cpu_percent"] for row in rows] == [40.0, None, 61.5]


def test_seconds_at_the_ceiling_are_those_of_the_gil_threads_at_95_percent_or_more():
    rows = [{"second": 0, "gil_cpu_percent": 94.9}, {"second": 1, "gil_cpu_percent": 95.0},
            {"second": 2, "gil_cpu_percent": None}, {"second": 3, "gil_cpu_percent": 112.0},
            {"second": 4}]  # fmt: skip
    assert at_ceiling(rows) == [1, 3]
