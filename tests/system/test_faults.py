"""Faults the server survives or reports (timerwheel.engine.store_health, docs/security.md
"Faults").

* A failed WAL sync: health NOT_SERVING on every service name, sends UNAVAILABLE, and
  `timerwheel serve` exits non-zero (so systemd or Kubernetes restart it).
* A read error while the writer is idle: logged and retried; timers still fire.
* A real full disk (a small tmpfs): RESOURCE_EXHAUSTED saying the disk is full, then, once
  space is freed, sends are accepted again in the same process and every acknowledged
  send is there; SIGTERM while the disk is full exits 0 without a traceback.

Waits are polls of a real condition with a deadline, never a sleep standing in for one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import grpc
import pytest
from helpers.serve_process import ServeProcess
from helpers.streams import Collector
from helpers.waits import WAIT_S
from helpers.wal_sync_child import INJECTED, FailingSync

from timerwheel.client import RemoteError, TimerClient
from timerwheel.server.app import SERVICE_NAMES

pytestmark = pytest.mark.system  # real `timerwheel serve` processes, a tmpfs filled up

REPO = Path(__file__).resolve().parents[2]
TMPFS_MB = 16  # room to open RocksDB (about 200 KiB) and for the few MiB the test writes
# Small memtables and cache, so the store fits the small tmpfs (defaults are 32 MiB each).
SMALL_STORE = {
    "write_buffer_bytes": 2 * 1024 * 1024,
    "wheel_write_buffer_bytes": 1024 * 1024,
    "block_cache_bytes": 4 * 1024 * 1024,
}
BODY = os.urandom(16_000)  # incompressible: the disk fills after a few hundred sends


def poll(condition: Callable[[], bool], timeout_s: float = WAIT_S) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def health_of_every_service(client: TimerClient) -> set[str]:
    return {client.health_status(name) for name in ("", *SERVICE_NAMES)}


# == a failed WAL sync ====================================================================
def test_a_failed_wal_sync_turns_health_not_serving_and_sends_unavailable(make_server):
    server = make_server(sync_writes=True)
    database = server.engine.store.database
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        before = client.send("orders", b"before", delay_ms=60_000)
        assert health_of_every_service(client) == {"SERVING"}
        database.db = FailingSync(database.db, allowed=0)
        with pytest.raises(RemoteError) as refused:
            client.send("orders", b"never acknowledged", delay_ms=60_000)
        assert refused.value.code is grpc.StatusCode.UNAVAILABLE
        assert INJECTED in refused.value.details
        assert poll(lambda: health_of_every_service(client) == {"NOT_SERVING"})
        assert server.failure is not None and INJECTED in server.failure
        assert not server.engine.writer_running()
        with pytest.raises(RemoteError) as again:
            client.send("orders", b"after", delay_ms=60_000)
        assert again.value.code is grpc.StatusCode.UNAVAILABLE
        assert client.get(before.message_id).state.name == "SCHEDULED"  # reads still work


def test_serve_exits_non_zero_when_the_wal_sync_fails(tmp_path):
    """The real entry point (patched only in its Rdict): start-up's two syncs pass, the
    first send's group commit (the first commit a caller waits on) fails to sync."""
    port_file = tmp_path / "port"
    args = [
        sys.executable, "-m", "tests.helpers.wal_sync_child", "2", "serve",
        "--data-dir", str(tmp_path / "data"), "--host", "127.0.0.1", "--port", "0",
        "--port-file", str(port_file), "--log-format", "json",
    ]  # fmt: skip
    proc = subprocess.Popen(
        args, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    try:
        assert poll(lambda: port_file.exists() and port_file.read_text().strip() != "")
        target = f"127.0.0.1:{port_file.read_text().strip()}"
        with TimerClient(target, timeout_s=WAIT_S) as client, pytest.raises(RemoteError) as refused:
            client.send("orders", b"never acknowledged", delay_ms=60_000)
        assert refused.value.code is grpc.StatusCode.UNAVAILABLE
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, (out, err)
    assert '"event": "writer_failed"' in out and INJECTED in out
    assert '"event": "server_not_serving"' in out
    assert err.strip().splitlines()[-1] == (
        f"timerwheel serve: exiting: syncing the WAL failed after a write: {INJECTED}"
    )
    assert "Traceback" not in out + err


# == a read error while idle ==============================================================
def test_a_read_error_while_idle_is_retried_and_timers_still_fire(make_server, collectors):
    server = make_server()
    store = server.engine.store
    real_first_key = store.first_key
    raised = threading.Event()
    calls_after = []

    def first_key_failing_once(wheel: str, lo: bytes):
        if not raised.is_set():
            raised.set()
            raise OSError("injected: IO error: read failed")
        calls_after.append(wheel)
        return real_first_key(wheel, lo)

    store.first_key = first_key_failing_once  # only the idle writer calls it
    assert raised.wait(WAIT_S)
    assert poll(lambda: len(calls_after) >= 2)  # idle again, after the backoff
    assert server.engine.writer_running()
    assert server.failure is None
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        assert health_of_every_service(client) == {"SERVING"}
        collector = Collector(client, "later")
        collectors.append(collector)
        sent = client.send("later", b"still fires", delay_ms=300)
        delivered = collector.wait_count(1)
        assert [d.message_id for d in delivered] == [sent.message_id]


# == a real full disk =====================================================================
@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A TMPFS_MB MiB tmpfs (needs root: skipped where mount is not permitted)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(mount_point)],
        capture_output=True, text=True,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        unmounted = subprocess.run(["umount", str(mount_point)], capture_output=True, text=True)
        if unmounted.returncode != 0:  # something still holds it: detach, never leak it
            subprocess.run(["umount", "-l", str(mount_point)], check=False)


def fill_with_ballast(disk: Path, leave_bytes: int) -> Path:
    """A file taking all but `leave_bytes` of the disk's free space."""
    ballast = disk / "ballast"
    size = max(os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - leave_bytes, 0)
    with open(ballast, "wb") as file:
        chunk = b"\0" * (1024 * 1024)
        for _ in range(size // len(chunk)):
            file.write(chunk)
    return ballast


def send_until_refused(client: TimerClient, acknowledged: list[str]) -> RemoteError:
    """Send batches (acknowledged ids kept) until one is refused; that error."""
    for batch in range(10_000):
        requests = [
            TimerClient.request("full", BODY, delay_ms=3_600_000, message_id=f"b{batch}-{i}")
            for i in range(20)
        ]
        try:
            results = client.send_batch(requests)
        except RemoteError as exc:
            return exc
        acknowledged.extend(r.message_id for r in results)
    raise AssertionError("the disk never filled")


def test_a_full_disk_refuses_sends_then_resumes_when_space_is_freed(small_disk, make_server):
    server = make_server(data_dir=str(small_disk / "data"), sync_writes=True, **SMALL_STORE)
    ballast = fill_with_ballast(small_disk, leave_bytes=8 * 1024 * 1024)
    acknowledged: list[str] = []
    with TimerClient(server.target, timeout_s=WAIT_S) as client:
        refused = send_until_refused(client, acknowledged)
        assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED, refused
        assert refused.details.startswith(f"disk full: {small_disk / 'data'}: No space left")
        assert acknowledged  # the disk filled after some sends were stored
        started = time.monotonic()
        with pytest.raises(RemoteError) as fast:  # refused at once, not queued
            client.send("full", b"refused", delay_ms=1_000)
        assert fast.value.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "disk full" in fast.value.details
        assert time.monotonic() - started < 1.0
        assert health_of_every_service(client) == {"SERVING"}  # waiting, not failed

        ballast.unlink()  # space is back: the same process must take sends again

        def accepted() -> bool:
            try:
                acknowledged.append(client.send("full", b"again", delay_ms=3_600_000).message_id)
            except RemoteError as exc:
                assert exc.code is grpc.StatusCode.RESOURCE_EXHAUSTED, exc
                return False
            return True

        assert poll(accepted, timeout_s=15)
        assert server.engine.writer_running() and server.failure is None
        # Every acknowledged send is there (Get raises NOT_FOUND for a lost one).
        states = {client.get(i, include_body=False).state.name for i in acknowledged}
        assert states == {"SCHEDULED"}


def test_sigterm_while_the_disk_is_full_exits_cleanly(small_disk):
    settings = [f"--set={name}={value}" for name, value in SMALL_STORE.items()]
    server = ServeProcess(small_disk / "data", *settings)
    try:
        ballast = fill_with_ballast(small_disk, leave_bytes=8 * 1024 * 1024)
        acknowledged: list[str] = []
        with server.client() as client:
            refused = send_until_refused(client, acknowledged)
        assert refused.code is grpc.StatusCode.RESOURCE_EXHAUSTED
        server.wait_event("disk_full")
        server.signal(15)
        assert server.wait_exit() == 0
        output = "".join(server.raw)
        assert "Traceback" not in output
        assert '"event": "server_stopped"' in output
    finally:
        server.kill()
    ballast.unlink()
    # Nothing acknowledged was lost: a new server on the same data dir has every send.
    restarted = ServeProcess(small_disk / "data", *settings)
    try:
        with restarted.client() as client:
            assert all(client.get(i, include_body=False) for i in acknowledged)
        restarted.signal(15)
        assert restarted.wait_exit() == 0
    finally:
        restarted.kill()


# == reads while the store is reopened ====================================================
def test_reads_during_a_reopen_answer_or_say_unavailable(tmp_path):
    """The writer's reopen (after a full disk) closes the database under readers: each
    read answers, or raises StoreUnavailable (UNAVAILABLE), never anything else."""
    from timerwheel.engine.engine import Engine
    from timerwheel.wheels.clock import VirtualClock
    from timerwheel.wheels.domain import SendSpec, StoreUnavailable, When, WhenKind
    from timerwheel.wheels.settings import Settings

    engine = Engine(Settings(data_dir=str(tmp_path / "d")), VirtualClock(0), background=False)
    try:
        sent = engine.send(SendSpec("orders", b"x", When(WhenKind.DELAY, 60_000)))
        stop = threading.Event()
        outcomes: dict[str, int] = {}

        def read() -> None:
            while not stop.is_set():
                try:
                    engine.get(sent.message_id)
                    outcome = "answered"
                except StoreUnavailable:
                    outcome = "unavailable"
                except Exception as exc:  # recorded: the test fails on it
                    outcome = repr(exc)
                outcomes[outcome] = outcomes.get(outcome, 0) + 1

        readers = [threading.Thread(target=read) for _ in range(2)]
        for reader in readers:
            reader.start()
        reopened = 0
        try:
            for _ in range(20):
                try:
                    engine.store.reopen()
                    reopened += 1
                except Exception as exc:  # a reader's column family held the LOCK
                    assert "lock" in str(exc).lower(), exc
                    assert poll(lambda: _reopen_or_none(engine.store))
                    reopened += 1
        finally:
            stop.set()
            for reader in readers:
                reader.join(WAIT_S)
        assert reopened == 20
        assert set(outcomes) <= {"answered", "unavailable"}, outcomes
        assert outcomes.get("answered", 0) > 0
        assert engine.get(sent.message_id).message_id == sent.message_id
        engine.send(SendSpec("orders", b"y", When(WhenKind.DELAY, 60_000)))  # writes again
    finally:
        engine.close()


def _reopen_or_none(store) -> bool:
    try:
        store.reopen()
    except Exception:
        return False
    return True
