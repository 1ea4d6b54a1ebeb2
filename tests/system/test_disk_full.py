"""A full disk with the default RocksDB settings (issue 76): writes are refused, reads go
on, and writes resume, in the same process and after a restart on the full disk, once
the disk has the free space the server states and docs/engine.md gives: the WAL files'
size, 2% and 1 MiB more (`timerwheel.store.disk.reopen_needs_bytes`).

Each test mounts a 64 MiB tmpfs (needs root: skipped with mount's reason elsewhere),
puts a ballast file on it, lets a real `timerwheel serve` fill the rest with
incompressible bodies until a send is refused, then shrinks the ballast until exactly
the stated figure is free (to the page) and polls a send until it is accepted, within
RESUME_BOUND_S. Every acknowledged send is read back at the end. The start on a full disk
runs in one process and with `--workers 1` (the store in the engine process).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from helpers.serve_process import ServeProcess
from helpers.tmpfs import PAGE, fill_up, free_bytes, free_up_to, tmpfs, write_ballast

from timerwheel.client import RemoteError, TimerClient
from timerwheel.engine.store_health import BACKOFF_MAX_S

pytestmark = pytest.mark.system  # real `timerwheel serve` processes, a tmpfs filled up

DISK_MB = 64
BALLAST = 36 * 1024 * 1024  # leaves the server ~28 MiB: a WAL under one 32 MiB memtable
BODY = os.urandom(16_000)  # incompressible: tables come out at the WAL's size
MIB = 1024 * 1024
# The writer looks at the free space every BACKOFF_MAX_S; the reopen replays and writes
# out ~28 MB of WAL (under a second here): generous for a loaded 2-core machine.
RESUME_BOUND_S = BACKOFF_MAX_S + 8


@pytest.fixture
def disk(tmp_path: Path) -> Iterator[Path]:
    with tmpfs(tmp_path / "disk", DISK_MB) as mount_point:
        yield mount_point


@pytest.fixture
def servers() -> Iterator[list[ServeProcess]]:
    started: list[ServeProcess] = []
    yield started
    for server in started:
        server.kill()


def documented_figure(data_dir: Path) -> int:
    """docs/engine.md's figure, computed here from the files, not by the server's code."""
    wal = sum(p.stat().st_size for p in data_dir.iterdir() if p.name.endswith(".log"))
    return wal + wal * 2 // 100 + MIB


def poll(condition: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def fill_until_refused(client: TimerClient, acknowledged: list[str]) -> RemoteError:
    for batch in range(10_000):
        requests = [
            TimerClient.request("full", BODY, delay_ms=3_600_000, message_id=f"b{batch}-{i}")
            for i in range(20)
        ]
        try:
            acknowledged.extend(r.message_id for r in client.send_batch(requests))
        except RemoteError as exc:
            return exc
    raise AssertionError("the disk never filled")


def assert_refused_as_disk_full(client: TimerClient, data_dir: Path) -> None:
    started = time.monotonic()
    with pytest.raises(RemoteError) as refused:
        client.send("full", b"refused", delay_ms=1_000)
    assert refused.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED, refused.value
    assert refused.value.details.startswith(f"disk full: {data_dir}: No space left on device")
    assert time.monotonic() - started < 1.0  # refused at once, not queued


def free_the_figure_and_resume(
    server: ServeProcess, client: TimerClient, ballast: Path, data_dir: Path,
    acknowledged: list[str],
) -> tuple[int, float]:  # fmt: skip
    """Free exactly the figure the server waits for; (the figure, seconds to resume)."""
    waiting = server.wait_event("disk_full_waiting")
    figure = waiting["needed_bytes"]
    assert figure == documented_figure(data_dir), waiting
    assert waiting["free_bytes"] < figure
    free = free_up_to(ballast, figure)
    assert figure <= free < figure + PAGE, (figure, free)
    freed_at = time.monotonic()

    def accepted() -> bool:
        try:
            sent = client.send("full", b"again", delay_ms=3_600_000)
        except RemoteError as exc:
            assert exc.code is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
            return False
        acknowledged.append(sent.message_id)
        return True

    assert poll(accepted, RESUME_BOUND_S), "".join(server.raw[-20:])
    resumed_s = time.monotonic() - freed_at
    reopened = server.wait_event("store_reopened")
    assert reopened["needed_bytes"] == figure
    return figure, resumed_s


def assert_all_there(client: TimerClient, acknowledged: list[str]) -> None:
    states = {client.get(i, include_body=False).state.name for i in acknowledged}
    assert states == {"SCHEDULED"}  # Get raises NOT_FOUND for a lost one


def test_writes_resume_in_process_once_the_stated_space_is_free(disk, servers):
    data_dir = disk / "data"
    ballast = write_ballast(disk / "ballast", BALLAST)
    server = ServeProcess(data_dir)
    servers.append(server)
    acknowledged: list[str] = []
    with server.client() as client:
        refused = fill_until_refused(client, acknowledged)
        assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert "writes resume once its disk has" in refused.details
        assert_refused_as_disk_full(client, data_dir)
        assert client.get(acknowledged[0]).body == BODY  # reads go on
        assert client.health_status("") == "SERVING"
        figure, resumed_s = free_the_figure_and_resume(
            server, client, ballast, data_dir, acknowledged
        )
        assert_all_there(client, acknowledged)
    print(
        f"\nin process: {len(acknowledged)} acknowledged; figure {figure / MIB:.2f} MiB "
        f"freed exactly; writes resumed {resumed_s:.2f} s later (bound {RESUME_BOUND_S:g} s)"
    )
    server.signal(15)
    assert server.wait_exit() == 0


@pytest.mark.parametrize("workers", [(), ("--workers", "1")], ids=["one-process", "engine-process"])
def test_a_start_on_a_full_disk_serves_reads_then_resumes_writes(disk, servers, workers):
    data_dir = disk / "data"
    ballast = write_ballast(disk / "ballast", BALLAST)
    first = ServeProcess(data_dir)
    servers.append(first)
    acknowledged: list[str] = []
    with first.client() as client:
        refused = fill_until_refused(client, acknowledged)
        assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED, refused
    first.signal(15)
    assert first.wait_exit() == 0
    fill_up(disk / "rest")  # what the stop freed, and more: not a byte free
    assert free_bytes(disk) == 0

    second = ServeProcess(data_dir, *workers)  # exited 1 before: a restart loop
    servers.append(second)
    opened = second.wait_event("store_opened_read_only")
    assert opened["free_bytes"] == 0 and opened["needed_bytes"] == documented_figure(data_dir)
    with second.client() as client:
        assert client.health_status("") == "SERVING"
        assert_refused_as_disk_full(client, data_dir)
        assert client.get(acknowledged[-1]).body == BODY  # reads, from the WAL replayed
        assert_all_there(client, acknowledged)
        (disk / "rest").unlink()
        figure, resumed_s = free_the_figure_and_resume(
            second, client, ballast, data_dir, acknowledged
        )
        assert_all_there(client, acknowledged)
    print(
        f"\nrestart on a full disk {workers}: served reads; figure {figure / MIB:.2f} MiB freed "
        f"exactly; writes resumed {resumed_s:.2f} s later (bound {RESUME_BOUND_S:g} s)"
    )
    second.signal(15)
    assert second.wait_exit() == 0
