"""Benchmark: fill a store with N timers, export it, run the capacity report; print figures.

    .venv/bin/python bench/export_report_bench.py --timers 10000000 --work /tmp/twbench

The store is filled with the real engine in virtual time (unsynced writes, batches of
10k): 20 topics of skewed popularity, bodies of 50..450 bytes, deliver times spread over
7 days with a few hot seconds, sent over a virtual window at 100k sends/s. The fill is
not what is measured; the export (timers/s) and the report (wall seconds on
``--master``, Spark start-up included) are. Results are printed as JSON.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import resource
import shutil
import sys
import threading
import time

import psutil

from timerwheel.capacity.report import ReportRequest, run_report
from timerwheel.capacity.tables import ReportOptions
from timerwheel.engine.engine import Engine
from timerwheel.store.export import export_data_dir
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, Settings

T0_MS = 1_700_000_000_000
CHUNK = 10_000
TOPICS = [f"topic-{i:02d}" for i in range(20)]
HOT_SECONDS_MS = [T0_MS + 3 * HOUR_MS + i * 7_919_000 for i in range(5)]


def fill(data_dir: str, timers: int) -> float:
    """N timers into a new store; returns the seconds it took."""
    clock = VirtualClock(T0_MS)
    settings = Settings(data_dir=data_dir, sync_writes=False)
    engine = Engine(settings, clock, background=False)
    started = time.monotonic()
    # Incompressible bodies, so storage per timer is not flattered by LZ4.
    bodies = [os.urandom(50 + 8 * i) for i in range(51)]
    try:
        for first in range(0, timers, CHUNK):
            specs = []
            for i in range(first, min(first + CHUNK, timers)):
                topic = TOPICS[min(i % 97, i % 19)]  # skewed: low topics are busier
                if i % 50 == 0:  # 2%: a few hot seconds
                    deliver_at_ms = HOT_SECONDS_MS[(i // 50) % 5] + i % 1_000
                else:
                    deliver_at_ms = T0_MS + HOUR_MS + (i * 104_729) % (7 * DAY_MS)
                when = When(WhenKind.DELIVER_AT, deliver_at_ms)
                specs.append(SendSpec(topic, bodies[i % 51], when))
            engine.send_batch(specs)
            clock.advance(100)  # 10k sends per 100 ms: an observed 100k sends/s
            if first % 1_000_000 == 0:
                print(f"filled {first:,}", file=sys.stderr, flush=True)
        engine.run_until_idle()
    finally:
        engine.close()
    return time.monotonic() - started


class PeakRss:
    """Samples the RSS of this process's child JVM (the Spark driver) every 0.5 s."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.5):
            for child in me.children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "java" in child.name():
                        self.peak = max(self.peak, child.memory_info().rss)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timers", type=int, default=10_000_000)
    parser.add_argument("--work", default="/tmp/timerwheel-bench")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--reuse", action="store_true", help="keep an already filled store")
    parser.add_argument("--fill-only", action="store_true", help="fill the store and stop")
    parser.add_argument("--export-only", action="store_true", help="stop after the export")
    args = parser.parse_args()

    data_dir = os.path.join(args.work, "data")
    export_dir = os.path.join(args.work, "export")
    report_dir = os.path.join(args.work, "report")
    results: dict = {"timers": args.timers, "master": args.master, "cpus": os.cpu_count(),
                     "python": platform.python_version()}  # fmt: skip
    if not (args.reuse and os.path.isdir(data_dir)):
        shutil.rmtree(args.work, ignore_errors=True)
        results["fill_seconds"] = round(fill(data_dir, args.timers), 1)
    if args.fill_only:
        print(json.dumps(results, indent=2))
        return 0
    shutil.rmtree(export_dir, ignore_errors=True)
    shutil.rmtree(report_dir, ignore_errors=True)

    results["load_average_before_export"] = os.getloadavg()
    summary = export_data_dir(data_dir, export_dir)
    results["export"] = {
        "seconds": round(summary.seconds, 1),
        "timers_per_second": round(summary.timers / summary.seconds),
        "rows": summary.rows,
        "files": summary.files,
        "bytes": summary.bytes,
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(results["export"]), file=sys.stderr, flush=True)
    if args.export_only:
        print(json.dumps(results, indent=2))
        return 0

    started = time.monotonic()
    request = ReportRequest(export_dir, report_dir, args.master, ReportOptions())
    with PeakRss() as jvm:
        report = run_report(request, say=lambda m: print(m, file=sys.stderr, flush=True))
    results["report"] = {
        "seconds": round(time.monotonic() - started, 1),
        "pending_timers": report.summary["pending_timers"],
        "peak_second_timers": report.summary["peak_second_timers"],
        "bytes_per_timer": report.summary["bytes_per_timer"],
        # The driver is this Python process and its JVM (the gateway, a child process).
        "driver_python_peak_rss_mib": round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        ),
        "driver_jvm_peak_rss_mib": round(jvm.peak / 2**20),
        "load_average_after": os.getloadavg(),
    }
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
