"""Fixtures of the service tests that share a set-up: a server on a virtual clock, whose
firing loop the test makes run late by moving the clock (the admission tests: sends
refused while fires run late, and the clients' retries of those refusals)."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest
from helpers.time_of_day import wall_ms

from timerwheel.server.app import TimerServer
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import Settings

VirtualServer = Callable[..., tuple[VirtualClock, TimerServer]]


@pytest.fixture
def virtual_server(tmp_path) -> Iterator[VirtualServer]:
    """`start(**settings)`: one server on port 0 and a VirtualClock at the wall time, with
    unsynced writes and the given Settings fields; (clock, server). Stopped at the end."""
    started: list[TimerServer] = []

    def start(**fields) -> tuple[VirtualClock, TimerServer]:
        assert not started, "one server a test: they would share the data dir"
        clock = VirtualClock(wall_ms())
        settings = Settings(
            data_dir=str(tmp_path / "data"), port=0, sync_writes=False, **fields
        )  # fmt: skip
        server = TimerServer(settings, clock=clock).start()
        started.append(server)
        return clock, server

    try:
        yield start
    finally:
        for server in started:
            server.stop(grace_s=1.0)


@pytest.fixture
def late_fires_server(virtual_server) -> tuple[VirtualClock, TimerServer]:
    """A virtual-clock server that fires one timer a chunk, so timers due together fire
    over several iterations in a row, each late once the clock is moved past them: the
    admission gate (admit_fire_lag_ms=20) closes. (clock, server)."""
    return virtual_server(fire_chunk=1, admit_fire_lag_ms=20)
