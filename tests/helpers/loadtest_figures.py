"""Figures of a load-test run as `timerwheel.loadtest.figures` makes them, for the
report's tests (tests/loadtest)."""

from __future__ import annotations

from datetime import datetime

from timerwheel.loadtest.accounting import Accounting

RUN_DATE = f"{datetime(2026, 11, 21, 10, 0):%Y-%m-%d %H:%M} UTC"  # as a run's figures say it


def fake_figures(**accounting_changes) -> dict:
    accounting = Accounting(True, sent=100, acked=100, delivered=100, **accounting_changes)
    delay = {"count": 100, "mean": 3, "p50": 2, "p90": 5, "p99": 9, "p999": 12, "max": 15}
    latency = {"count": 2, "mean": 1_500, "p50": 1_000, "p90": 2_000, "p99": 2_000,
               "p999": 2_000, "max": 2_000}  # fmt: skip
    return {
        "scenario": "tdmq", "description": "d", "date": RUN_DATE,
        "target": "spawned",
        "machine": {"cpus": 2, "load_before": (0.5, 0.4, 0.3),
                    "python": {"version": "CPython 3.11.2", "executable": "/usr/bin/python3.11",
                               "libpython": "static"}},
        "config": {"producers": 4, "batch": 100, "rate": 14_000, "delay": "3 s..1 min",
                   "consumers": 1, "ack_linger_ms": 10, "messages": 840_000,
                   "duration_s": 60.0},
        "send": {"rate_achieved": 13_990, "rate_target": 14_000, "rate_reached": True,
                 "latency_us": latency, "from_intended_us": latency, "sent": 100,
                 "planned": 100, "cancel_too_late": 0, "errors": {},
                 "max_behind_schedule_ms": 3},
        "delay_error_ms": delay, "fire_lateness_ms": delay,
        "delivery_lag_ms": {**delay, "p999": 7, "max": 8},
        "ack_round_trip_ms": {**delay, "p50": 3, "p99": 11, "max": 12},
        "delivery": {"span_ms": 61_000},
        "timeline": [
            {"second": 0, "delay_max_ms": 4, "fire_max_ms": 1, "server_cpu_percent": None},
            {"second": 1, "delay_max_ms": 15, "fire_max_ms": 9, "server_cpu_percent": 97.5,
             "writer_cpu_percent": 61.0, "gil_cpu_percent": 98.0,
             "rocksdb_cpu_percent": 45.5, "machine_cpu_percent": 186.0},
            {"second": 2, "delay_max_ms": 6, "fire_max_ms": 2, "server_cpu_percent": 40.0,
             "rocksdb_cpu_percent": None},
        ],
        "seconds_at_ceiling": [1],
        "server": {"cpu_percent_send": 88.5, "cpu_percent_run": 70.0,
                   "thread_cpu_percent_send": {"grpc_calls": 20.0, "main": 0.4,
                                               "rocksdb_compaction": 3.2, "writer": 61.5},
                   "peak_rss_bytes": 200 * 2**20, "data_dir_bytes": 2**20,
                   "bytes_per_timer": None},
        "harness_cpu_s": 12.0,
        "accounting": accounting.as_dict(),
        "ok": not accounting.problems(),
    }  # fmt: skip
