"""Shared fixtures: a live in-process server on 127.0.0.1 port 0, a real `timerwheel serve`
subprocess, and a collector that consumes a Subscribe stream on a thread of its own.

Every wait here is on a condition or an event with a bounded timeout, never a bare sleep;
every server and process started is stopped (or killed) in a `finally`.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import psutil
import pytest
from timerwheel.security.settings import SecuritySettings
from timerwheel.server.app import TimerServer
from timerwheel.wheels.settings import Settings

from timerwheel.client import RemoteError, TimerClient
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

WAIT_S = 10.0  # generous: the suite runs beside other work on 2 cores


# == the time of day a test runs at ========================================================
# TIMERWHEEL_TEST_TIME_OF_DAY="MM:SS.fff" pins every test's start to that moment of an hour
# (tests/test_time_of_day.py re-runs the `wallclock` tests at the worst moments): servers
# started by these fixtures run with Settings.clock_offset_ms, and `wall_ms()`, the tests'
# own notion of now, is shifted by the same offset. Unset: no shift.
TIME_OF_DAY_ENV = "TIMERWHEEL_TEST_TIME_OF_DAY"
_clock_offset_ms = 0


def offset_to(time_of_day: str, now_ms: int) -> int:
    """The offset in [0, 1 h) that moves `now_ms` to the next "MM:SS.fff" of an hour."""
    minutes, seconds = time_of_day.split(":")
    target_ms = round((int(minutes) * 60 + float(seconds)) * 1000)
    if not 0 <= target_ms < 3_600_000:
        raise ValueError(f"{TIME_OF_DAY_ENV}={time_of_day!r}: not a moment of an hour")
    return (target_ms - now_ms % 3_600_000) % 3_600_000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000 + _clock_offset_ms


@pytest.fixture(autouse=True)
def pinned_time_of_day(monkeypatch) -> Iterator[int]:
    """Each test starts at the pinned moment: the offset is computed at its start."""
    global _clock_offset_ms
    moment = os.environ.get(TIME_OF_DAY_ENV)
    _clock_offset_ms = offset_to(moment, time.time_ns() // 1_000_000) if moment else 0
    if _clock_offset_ms:  # `timerwheel serve` subprocesses read it from the environment
        monkeypatch.setenv("TIMERWHEEL_CLOCK_OFFSET_MS", str(_clock_offset_ms))
    try:
        yield _clock_offset_ms
    finally:
        _clock_offset_ms = 0


# == in-process server ======================================================================
@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[Callable[..., TimerServer]]:
    """`make_server(**settings)`: a started server on port 0 over a data dir in tmp_path
    (`security=SecuritySettings(...)` for TLS, tokens or an export root)."""
    servers: list[TimerServer] = []

    def make(
        data_dir: str | None = None, security: SecuritySettings | None = None, **changes: object
    ) -> TimerServer:
        changes.setdefault("sync_writes", False)  # fsync per commit is tested by the crash tests
        changes.setdefault("clock_offset_ms", _clock_offset_ms)
        settings = Settings(data_dir=data_dir or str(tmp_path / "data"), port=0, **changes)
        server = TimerServer(settings, security=security).start()
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop(grace_s=1.0)


@pytest.fixture
def server(make_server) -> TimerServer:
    return make_server()


@pytest.fixture
def client(server: TimerServer) -> Iterator[TimerClient]:
    with TimerClient(server.target, timeout_s=WAIT_S) as connected:
        yield connected


def own_connection(target: str) -> TimerClient:
    """A client on a connection of its own: channels of one process to one target share a
    connection unless told to use a local subchannel pool."""
    client = TimerClient(target, timeout_s=WAIT_S)
    client.close()
    client.channel = grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])
    client.channels = [client.channel]  # what close() closes
    client.service = pb_grpc.TimerServiceStub(client.channel)
    return client


# == consuming a Subscribe stream ===========================================================
class Collector:
    """Reads a Subscribe stream on a thread; records each delivery with its arrival time.

    `auto_ack` acks each batch as it arrives. Waits use a Condition with a timeout.
    """

    def __init__(
        self, client: TimerClient, topic: str, *, max_in_flight: int = 0, auto_ack: bool = True
    ) -> None:
        self.client = client
        self.topic = topic
        self.auto_ack = auto_ack
        self.deliveries: list[tuple[pb.Delivery, int]] = []  # (delivery, arrival wall ms)
        self.batch_sizes: list[int] = []
        self.error: Exception | None = None
        self.ended = threading.Event()
        self._cond = threading.Condition()
        self.subscription = client.subscribe(topic, max_in_flight)
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            for batch in self.subscription:
                arrived = wall_ms()
                if self.auto_ack:
                    self.client.ack(self.topic, [d.message_id for d in batch])
                with self._cond:
                    self.batch_sizes.append(len(batch))
                    self.deliveries.extend((d, arrived) for d in batch)
                    self._cond.notify_all()
        except Exception as exc:  # recorded for the test to assert on
            self.error = exc
        finally:
            self.ended.set()
            with self._cond:
                self._cond.notify_all()

    def ids(self) -> list[str]:
        with self._cond:
            return [d.message_id for d, _ in self.deliveries]

    def wait_for(self, predicate: Callable[[Collector], bool], timeout_s: float = WAIT_S) -> bool:
        """Wait until `predicate(self)` holds (True) or the timeout passes (False)."""
        with self._cond:
            return self._cond.wait_for(
                lambda: predicate(self) or self.ended.is_set(), timeout_s
            ) and predicate(self)

    def wait_count(self, count: int, timeout_s: float = WAIT_S) -> list[pb.Delivery]:
        if not self.wait_for(lambda c: len(c.deliveries) >= count, timeout_s):
            raise AssertionError(
                f"got {len(self.deliveries)} of {count} deliveries in {timeout_s}s "
                f"(stream error: {self.error})"
            )
        with self._cond:
            return [d for d, _ in self.deliveries]

    def stop(self) -> None:
        self.subscription.cancel()
        self.ended.wait(WAIT_S)


@pytest.fixture
def collectors() -> Iterator[list[Collector]]:
    """Append Collectors here; they are cancelled at the end of the test."""
    made: list[Collector] = []
    try:
        yield made
    finally:
        for collector in made:
            collector.stop()


# == a producer on a thread =================================================================
class Producer:
    """Sends batches on a thread until stopped or refused; remembers what was acknowledged."""

    def __init__(self, target: str, topic: str, delay_ms: int) -> None:
        self.client = TimerClient(target, timeout_s=WAIT_S)
        self.topic, self.delay_ms = topic, delay_ms
        self.acknowledged: list[str] = []
        self.errors: list[grpc.StatusCode] = []
        self.batches = 0
        self.stop = threading.Event()
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        index = 0
        while not self.stop.is_set():
            requests = [
                TimerClient.request(self.topic, f"p{index + i}", delay_ms=self.delay_ms)
                for i in range(50)
            ]
            index += 50
            try:
                results = self.client.send_batch(requests)
            except RemoteError as exc:
                self.errors.append(exc.code)
                break
            with self._cond:
                self.acknowledged.extend(r.message_id for r in results)
                self.batches += 1
                self._cond.notify_all()
        with self._cond:
            self.stop.set()
            self._cond.notify_all()

    def wait_batches(self, count: int) -> None:
        with self._cond:
            assert self._cond.wait_for(lambda: self.batches >= count, WAIT_S), self.errors

    def join(self) -> None:
        self.stop.set()
        self._thread.join(WAIT_S)
        self.client.close()


# == a real `timerwheel serve` process ======================================================
TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")


class ServeProcess:
    """`timerwheel serve --port 0` as a subprocess; its JSON log lines are parsed as they come."""

    def __init__(self, data_dir: Path, *extra: str, tmp_dir: str | None = None) -> None:
        self.args = [
            TIMERWHEEL, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1",
            "--port", "0", "--log-format", "json", *extra,
        ]  # fmt: skip
        # Where a `--workers` supervisor makes its runtime dir (unix sockets): a SIGKILLed
        # supervisor cannot remove it, so `kill` removes this one around it. Given, it is
        # shared with the server started before (the next start removes a dead one's).
        self.tmp_dir = tmp_dir or tempfile.mkdtemp(prefix="tw-serve-")
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "TMPDIR": self.tmp_dir}
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        self.events: list[dict] = []
        self.raw: list[str] = []
        self._cond = threading.Condition()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        # The server's child processes (engine, delivery, workers), by name; empty when
        # it runs in one process (or did not start: `kill` below needs it then too).
        self.children: dict[str, int] = {}
        try:
            started = self.wait_event("server_started", timeout_s=30)
        except BaseException:
            self.kill()
            raise
        self.port = int(started["port"])
        self.target = f"127.0.0.1:{self.port}"
        self.children = dict(started.get("pids", {}))

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            with self._cond:
                self.raw.append(line)
                with contextlib.suppress(json.JSONDecodeError):  # not every line is a log
                    self.events.append(json.loads(line))
                self._cond.notify_all()
        with self._cond:
            self._cond.notify_all()

    def wait_event(self, name: str, timeout_s: float = WAIT_S) -> dict:
        def found() -> dict | None:
            return next((e for e in self.events if e.get("event") == name), None)

        with self._cond:
            self._cond.wait_for(
                lambda: found() is not None or self.proc.poll() is not None, timeout_s
            )
            event = found()
        if event is None:
            raise AssertionError(f"no {name!r} log line; output so far:\n{''.join(self.raw)}")
        return event

    def client(self) -> TimerClient:
        return TimerClient(self.target, timeout_s=WAIT_S)

    def signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def wait_exit(self, timeout_s: float = 30) -> int:
        code = self.proc.wait(timeout=timeout_s)
        self._reader.join(timeout=WAIT_S)
        return code

    def kill(self) -> None:
        """SIGKILL the server; its children die with it (timerwheel.procs.lifecycle), waited for
        here so
        the next start finds RocksDB's lock free; then remove its temporary files."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=WAIT_S)
        self.wait_children_gone()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    def wait_children_gone(self, timeout_s: float = WAIT_S) -> list[int]:
        """Wait for the child processes to exit; kill (and return) any still running."""
        alive = []
        for pid in self.children.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                alive.append(psutil.Process(pid))
        _, still = psutil.wait_procs(alive, timeout=timeout_s)
        for process in still:
            with contextlib.suppress(psutil.NoSuchProcess):
                process.kill()
        return [process.pid for process in still]


@pytest.fixture
def serve_process() -> Iterator[Callable[..., ServeProcess]]:
    """`serve_process(data_dir, *flags, tmp_dir=None)`: start a real server; killed at the
    end if alive."""
    started: list[ServeProcess] = []

    def start(data_dir: Path, *extra: str, tmp_dir: str | None = None) -> ServeProcess:
        process = ServeProcess(data_dir, *extra, tmp_dir=tmp_dir)
        started.append(process)
        return process

    try:
        yield start
    finally:
        for process in started:
            process.kill()


def status_of(call: Callable[[], object]) -> RemoteError:
    """The RemoteError `call()` raises (fails the test when it succeeds)."""
    try:
        result = call()
    except RemoteError as exc:
        return exc
    raise AssertionError(f"expected an error, got {result!r}")
