"""Shared fixtures: a live in-process server on 127.0.0.1 port 0, a real `timerwheel serve`
subprocess, Subscribe collectors stopped at the end, and each test's pinned time of day;
and the hypothesis example budget of the run (helpers/budget.py).

The classes and functions the fixtures and tests share live in tests/helpers/ (importable
as `helpers.x`: pyproject's pytest `pythonpath`). Every server and process started here
is stopped (or killed) in a `finally`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import structlog
from helpers import budget
from helpers.serve_process import ServeProcess
from helpers.streams import Collector
from helpers.time_of_day import TIME_OF_DAY_ENV, clock_offset_ms, offset_to, set_clock_offset_ms
from helpers.waits import WAIT_S
from hypothesis import settings as hypothesis_settings

from timerwheel.client import TimerClient
from timerwheel.security.settings import SecuritySettings
from timerwheel.server.app import TimerServer
from timerwheel.wheels.settings import Settings


# == the example budget of hypothesis searches (helpers/budget.py) =========================
def pytest_configure(config: pytest.Config) -> None:
    """The inner loop (`-m` deselecting `system`) runs each search with a quarter of its
    examples; plain `pytest` runs the full budget. TIMERWHEEL_EXAMPLES=full|inner overrides."""
    chosen = os.environ.get(budget.PROFILE_ENV)
    if chosen not in ("full", "inner"):
        markexpr = " ".join((config.getoption("markexpr", "") or "").split())
        chosen = "inner" if "not system" in markexpr else "full"
    budget.profile = chosen
    hypothesis_settings.register_profile("full", hypothesis_settings.get_profile("default"))
    hypothesis_settings.register_profile("inner", max_examples=budget.INNER_DEFAULT)
    hypothesis_settings.load_profile(chosen)


# == no test talks to a server it did not start ============================================
@pytest.fixture(autouse=True)
def no_operator_target(monkeypatch) -> None:
    """A shell's TIMERWHEEL_TARGET would point commands that use the default at a server the
    operator runs (the README's on 7070): tests give --target, or test the default unset."""
    monkeypatch.delenv("TIMERWHEEL_TARGET", raising=False)


# == each test leaves structlog's configuration as it found it ============================
@pytest.fixture(autouse=True)
def structlog_config_restored() -> Iterator[None]:
    """A command run in this process (`main(["loadtest", ...])`, `main(["serve", ...])`) sets
    up logging for the whole process, as it must when it is the process: `timerwheel loadtest`
    filters below warning out. `capture_logs` swaps only the processors, so no later test
    saw the info events it asserts on (tests/observability/test_log_isolation.py). The
    processors list is put back in place, as `capture_logs` does, for loggers that hold it."""
    saved = structlog.get_config()
    processors = saved.pop("processors")
    contents = list(processors)
    try:
        yield
    finally:
        processors[:] = contents
        structlog.configure(processors=processors, **saved)


# == the time of day a test runs at (helpers/time_of_day.py) ===============================
@pytest.fixture(autouse=True)
def pinned_time_of_day(monkeypatch) -> Iterator[int]:
    """Each test starts at the pinned moment: the offset is computed at its start."""
    moment = os.environ.get(TIME_OF_DAY_ENV)
    offset_ms = offset_to(moment, time.time_ns() // 1_000_000) if moment else 0
    set_clock_offset_ms(offset_ms)
    if offset_ms:  # `timerwheel serve` subprocesses read it from the environment
        monkeypatch.setenv("TIMERWHEEL_CLOCK_OFFSET_MS", f"{offset_ms}ms")
    try:
        yield offset_ms
    finally:
        set_clock_offset_ms(0)


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
        changes.setdefault("clock_offset_ms", clock_offset_ms())
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


# == consuming a Subscribe stream (helpers/streams.py) ====================================
@pytest.fixture
def collectors() -> Iterator[list[Collector]]:
    """Append Collectors here; they are cancelled at the end of the test."""
    made: list[Collector] = []
    try:
        yield made
    finally:
        for collector in made:
            collector.stop()


# == a real `timerwheel serve` process (helpers/serve_process.py) =========================
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
