"""The server under test: a spawned `timerwheel serve`, and the Stats sampler.

`SpawnedServer` runs `python -m timerwheel.cli.main serve` on a temporary data dir, on 127.0.0.1
port 0, and learns the port from its `server_started` JSON log line (read on a thread,
which then keeps copying the log to `server.log` so the pipe never fills). Leaving the
`with` block always stops it: SIGTERM, a bounded wait, then SIGKILL; the data dir is
removed unless `keep` is set. If the harness dies without leaving it (SIGKILL), the
kernel sends the server SIGTERM (`PR_SET_PDEATHSIG`): it stops as it would on Ctrl-C.

`StatsSampler` takes a sample once a second on a thread: for the server under test
`stats_reader` calls TimerAdmin.Stats (RSS, CPU seconds, the data dir's bytes and the key
counts); the Redis peer (bench/peer_redis.py) samples its redis-server the same way.
CPU% over an interval is d(cpu seconds) / d(wall seconds) x 100, so 100% is one core
busy. For a spawned server the kernel's own peak RSS (VmHWM in /proc/PID/status) is read
as well: it cannot miss a peak between samples.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import structlog

from timerwheel.client import TimerClient
from timerwheel.procs.lifecycle import die_with_parent

log = structlog.get_logger("timerwheel.loadtest")

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 60.0


class ServerStartError(RuntimeError):
    """The spawned server exited or stayed silent instead of serving."""


class SpawnedServer:
    def __init__(self, serve_flags: Sequence[str] = (), keep: bool = False) -> None:
        self.work_dir = Path(tempfile.mkdtemp(prefix="timerwheel-loadtest-"))
        self.data_dir = self.work_dir / "data"
        self.log_path = self.work_dir / "server.log"
        self.keep = keep
        self.args = [
            sys.executable, "-m", "timerwheel.cli.main", "serve", "--data-dir", str(self.data_dir),
            "--host", "127.0.0.1", "--port", "0", "--log-format", "json", *serve_flags,
        ]  # fmt: skip
        self.proc: subprocess.Popen | None = None
        self.port = 0
        self._started = threading.Event()
        self._reader: threading.Thread | None = None

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def __enter__(self) -> SpawnedServer:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
            preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
        )  # fmt: skip
        try:
            self._reader = threading.Thread(target=self._read_log, daemon=True)
            self._reader.start()
            if not self._started.wait(START_TIMEOUT_S) or not self.port:
                self.stop()  # then its log is complete
                raise ServerStartError(
                    f"timerwheel serve did not start (exit code {self.proc.poll()}); the "
                    f"end of its log:\n{self._log_tail()}"
                )
        except BaseException:
            self.__exit__()  # Python calls it only once __enter__ has returned
            raise
        log.info("server_spawned", pid=self.proc.pid, port=self.port, data_dir=str(self.data_dir))
        return self

    def _read_log(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        with open(self.log_path, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                if not self._started.is_set():
                    with contextlib.suppress(json.JSONDecodeError):
                        event = json.loads(line)
                        if isinstance(event, dict) and event.get("event") == "server_started":
                            self.port = int(event["port"])
                            self._started.set()
        self._started.set()  # the process ended: unblock a waiting start

    def _log_tail(self, lines: int = 5) -> str:
        """The last lines the stopped server wrote (its work dir goes after a failed start)."""
        with contextlib.suppress(OSError), open(self.log_path) as log_file:
            return "".join(log_file.readlines()[-lines:]).rstrip()
        return "(no log)"

    def peak_rss_bytes(self) -> int:
        """VmHWM of the live server: the sum over its processes (the supervisor and its
        engine, delivery and worker children), an upper bound of the whole server's peak;
        0 when unavailable."""
        pids = [self.pid]
        with contextlib.suppress(psutil.Error):
            pids += [child.pid for child in psutil.Process(self.pid).children(recursive=True)]
        return sum(vm_hwm_bytes(pid) for pid in pids)

    def stop(self) -> int | None:
        """SIGTERM, wait, SIGKILL if needed; returns the exit code."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                log.warning("server_kill", pid=self.proc.pid)
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT_S)
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.proc.returncode

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            if not self.keep:
                shutil.rmtree(self.work_dir, ignore_errors=True)


def vm_hwm_bytes(pid: int) -> int:
    """The peak resident set (VmHWM) of process `pid`; 0 when unavailable."""
    with contextlib.suppress(OSError, ValueError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return 0


@dataclass(frozen=True)
class Sample:
    at_s: float  # monotonic
    wall_s: float  # time.time() of the same moment: places the sample in the timeline
    cpu_s: float
    rss_bytes: int
    data_dir_bytes: int
    keys: dict[str, int]
    unacked: int
    # The engine process's CPU seconds by kind of thread (timerwheel.observability.thread_cpu), if
    # reported.
    thread_cpu_s: dict[str, float] = field(default_factory=dict)
    # The whole machine's busy CPU seconds at the same moment (`machine_busy_s`), read by
    # the harness: the server shares the cores with it, so were they free then?
    machine_busy_s: float | None = None


def machine_busy_s() -> float:
    """CPU seconds every core of this machine has spent busy since boot: every process
    and the kernel's own work (interrupts, and time the hypervisor took); idle and I/O
    wait left out. Only meaningful for a server on this machine, which the harness's
    loopback-only targets are."""
    times = psutil.cpu_times()
    busy = times.user + times.nice + times.system
    return busy + sum(getattr(times, name, 0.0) for name in ("irq", "softirq", "steal"))


def stats_reader(client: TimerClient) -> Callable[[], Sample]:
    """Reads one `Sample` from the server's TimerAdmin.Stats."""

    def read() -> Sample:
        stats = client.stats()
        return Sample(
            time.monotonic(), time.time(), stats.cpu_seconds, stats.rss_bytes,
            stats.data_dir_bytes, dict(stats.column_family_keys), stats.unacked,
            dict(stats.thread_cpu_seconds), machine_busy_s(),
        )  # fmt: skip

    return read


class StatsSampler:
    """Takes a `Sample` every `interval_s` on a thread, until `stop()`: `read` is
    `stats_reader(client)` for a timerwheel server, or anything that makes one (the
    Redis peer reads its server's CPU)."""

    def __init__(
        self, read: Callable[[], Sample], interval_s: float = 1.0, join_timeout_s: float = 30
    ) -> None:
        self.read = read
        self.interval_s = interval_s
        self.join_timeout_s = join_timeout_s
        self.samples: list[Sample] = []
        self.errors = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="stats", daemon=True)

    def start(self) -> StatsSampler:
        self.sample()
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def sample(self) -> Sample | None:
        try:
            sample = self.read()
        except Exception:  # a busy server may miss a sample; counted, not fatal
            self.errors += 1
            return None
        self.samples.append(sample)
        return sample

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.join_timeout_s)

    def cpu_percent(self, since_s: float, until_s: float) -> float:
        """Server CPU over the samples inside [since_s, until_s] (100 = one core)."""
        inside = [s for s in self.samples if since_s <= s.at_s <= until_s]
        if len(inside) < 2 or inside[-1].at_s <= inside[0].at_s:
            return 0.0
        first, last = inside[0], inside[-1]
        return round(100 * (last.cpu_s - first.cpu_s) / (last.at_s - first.at_s), 1)

    def thread_cpu_percent(self, since_s: float, until_s: float) -> dict[str, float]:
        """The engine process's CPU by kind of thread over the samples inside [since_s,
        until_s] (100 = one core); {} when the server reports none."""
        inside = [s for s in self.samples if since_s <= s.at_s <= until_s]
        if len(inside) < 2 or inside[-1].at_s <= inside[0].at_s:
            return {}
        first, last = inside[0], inside[-1]
        span_s = last.at_s - first.at_s
        return {
            kind: round(100 * (seconds - first.thread_cpu_s.get(kind, 0.0)) / span_s, 1)
            for kind, seconds in last.thread_cpu_s.items()
        }

    def cpu_percent_by_second(self, threads: Collection[str] = ()) -> dict[int, float]:
        """Server CPU between consecutive samples (100 = one core), by the wall-clock
        second (epoch) the middle of each interval falls in: the whole server's, or with
        `threads` those kinds of the engine process's threads together (where both
        samples report them)."""
        if not threads:
            return self._by_second(lambda sample: sample.cpu_s)

        def of_threads(sample: Sample) -> float | None:
            if not all(t in sample.thread_cpu_s for t in threads):
                return None
            return sum(sample.thread_cpu_s[t] for t in threads)

        return self._by_second(of_threads)

    def machine_percent_by_second(self) -> dict[int, float]:
        """The whole machine's busy CPU between consecutive samples (100 = one core: on
        two cores, 200 is both busy), by wall-clock second as `cpu_percent_by_second`."""
        return self._by_second(lambda sample: sample.machine_busy_s)

    def _by_second(self, measure: Callable[[Sample], float | None]) -> dict[int, float]:
        """How fast `measure` (CPU seconds) grew between consecutive samples (100 = one
        core), by the wall-clock second the middle of each interval falls in; intervals
        where either sample lacks it give no figure."""
        by_second = {}
        for before, after in itertools.pairwise(self.samples):
            start, end = measure(before), measure(after)
            if after.at_s <= before.at_s or start is None or end is None:
                continue
            second = int((before.wall_s + after.wall_s) / 2)
            by_second[second] = round(100 * (end - start) / (after.at_s - before.at_s), 1)
        return by_second

    def peak_rss_bytes(self) -> int:
        return max((s.rss_bytes for s in self.samples), default=0)

    def last(self) -> Sample | None:
        return self.samples[-1] if self.samples else None
