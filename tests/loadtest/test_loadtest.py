"""`timerwheel loadtest` end to end: real worker processes, real servers, real accounting.

* `smoke` against a spawned `timerwheel serve`: nothing lost, nothing early, every message
  acked, and no process left behind;
* `cancel` against a running (in-process) server via --target: cancelled timers are never
  delivered and sent = acked + cancelled;
* the harness catches a server that fires early (its clock runs ahead) and one that never
  fires (its clock runs behind): exit status 1, with the problem named; what a server
  (dialled or spawned) still holds at the end is late, not lost; with --keep-data its work dir stays
  where the report says (removed otherwise);
* producers behind schedule: stopped once the send phase has overrun its bound (the run
  fails, saying so), or, given a long enough overrun, they send everything and the run
  passes with the rate reported as not reached (backlog's case);
* SIGTERM in the middle of a run, to the harness or to its whole process group, stops
  every process the run started and removes the spawned server's data dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from helpers.processes import command_line, descendants

from timerwheel.cli.main import main
from timerwheel.engine.system_clock import SystemClock
from timerwheel.loadtest.figures import at_ceiling
from timerwheel.loadtest.interpreter import describe, interpreter
from timerwheel.observability import thread_cpu
from timerwheel.server.app import TimerServer
from timerwheel.wheels.settings import Settings

# system: load runs: worker processes and spawned servers
pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]

QUIET = ("--no-progress",)


def run_loadtest(tmp_path: Path, *args: str) -> tuple[int, dict, str]:
    out = tmp_path / "figures.json"
    code = main(["loadtest", *args, *QUIET, "--json", str(out)])
    return code, json.loads(out.read_text()), out.read_text()


def skewed_clock(skew_ms: int) -> SystemClock:
    """The wall clock shifted by `skew_ms`: a server that believes it is later (or earlier)."""
    return SystemClock(skew_ms)


def child_pids() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def leftover_processes(before: set[int]) -> list[str]:
    """Children started since `before` that still exist (running, or exited but never
    reaped), but multiprocessing's own resource tracker (it lives as long as the process
    that started it). Earlier tests' children are not this test's business."""
    leftovers = []
    for child in psutil.Process().children(recursive=True):
        if child.pid in before:
            continue
        try:
            command = " ".join(child.cmdline())
        except psutil.ZombieProcess:
            command = f"<zombie pid {child.pid}: exited, never reaped>"
        except psutil.NoSuchProcess:
            continue  # exited and reaped while we looked
        if "resource_tracker" not in command:
            leftovers.append(command)
    return leftovers


def start_server(tmp_path: Path, clock=None) -> TimerServer:
    settings = Settings(data_dir=str(tmp_path / "data"), port=0, sync_writes=False)
    return TimerServer(settings, clock).start()


def test_smoke_scenario_spawned_server_accounts_for_every_message(tmp_path, capsys):
    before = child_pids()
    code, fig, _ = run_loadtest(tmp_path, "--scenario", "smoke")
    table = capsys.readouterr().out
    acc = fig["accounting"]
    assert code == 0, acc["problems"]
    planned = fig["send"]["planned"]
    assert planned == 6_000 and acc["sent"] == planned and acc["acked"] == planned
    assert acc["delivered"] == planned and acc["balanced"] and acc["problems"] == []
    assert acc["lost"] == 0 and acc["early"] == 0 and acc["unexpected"] == 0
    assert fig["delay_error_ms"]["count"] == planned  # every message timed once
    assert fig["early_ms"]["count"] == 0
    acks = fig["ack_round_trip_ms"]  # every Ack batch the consumer sent, timed
    assert 1 <= acks["count"] <= planned and 0 < acks["p50"] <= acks["max"] < 30_000
    assert "- consumers' Ack calls, sent -> answered, P50 / P99 / max" in table
    timeline = fig["timeline"]  # per second of deliver time: its worst
    assert [row["second"] for row in timeline] == list(range(len(timeline)))
    assert max(row["delay_max_ms"] for row in timeline) == fig["delay_error_ms"]["max"]
    assert max(row["fire_max_ms"] for row in timeline) == fig["fire_lateness_ms"]["max"]
    assert any(row["server_cpu_percent"] for row in timeline)  # the server was busy then
    assert any(row["writer_cpu_percent"] for row in timeline)  # and its writer
    assert any(row["gil_cpu_percent"] for row in timeline)  # and its GIL's threads together
    assert all("rocksdb_cpu_percent" in row for row in timeline)  # RocksDB's threads: maybe idle
    busy_machine = [row["machine_cpu_percent"] for row in timeline if row["machine_cpu_percent"]]
    assert busy_machine and all(  # the machine, harness included: at least the server's share
        row["machine_cpu_percent"] + 25 >= row["server_cpu_percent"]
        for row in timeline
        if row["machine_cpu_percent"] is not None and row["server_cpu_percent"] is not None
    )
    assert fig["seconds_at_ceiling"] == at_ceiling(timeline)
    assert "- seconds with the engine process's Python threads at 95% of a core or more" in table
    by_thread = fig["server"]["thread_cpu_percent_send"]  # the one process's threads
    assert set(by_thread) == set(thread_cpu.KINDS)  # the threads' names are the table's:
    assert by_thread["writer"] > 0 and by_thread["grpc_calls"] > 0 and by_thread["grpc_streams"] > 0
    assert "- worst seconds of deliver time" in table and ", writer " in table
    assert "- server CPU by thread, send phase (the engine's process; 100% = one core): " in table
    assert fig["send"]["latency_us"]["count"] == planned // 50  # one per SendBatch of 50
    assert fig["send"]["rate_achieved"] > 1_000  # paced to 2,000/s over 3 s
    assert fig["server"]["peak_rss_bytes"] > 10 * 2**20 and fig["server"]["stats_samples"] >= 2
    assert "| timerwheel (" in table and "- result: OK" in table
    assert fig["machine"]["python"] == interpreter()  # the harness's, and the server's with it
    python = describe(interpreter())
    assert f"- interpreter (the harness's and the spawned server's): {python}" in table
    assert fig["server"]["kept_dir"] is None and ", kept in " not in table  # removed
    assert leftover_processes(before) == []  # the server and the workers are all gone


def test_overload_refused_sends_are_accounted_and_nothing_stored_is_lost(tmp_path, capsys):
    """The overload scenario against a server whose writer queue holds one batch: what
    the writer refuses (RESOURCE_EXHAUSTED) is counted at the producers, not as lost, and
    every message is either stored (then delivered and acked) or refused."""
    code, fig, _ = run_loadtest(
        tmp_path, "--scenario", "overload", "--rate", "4000", "--duration", "3s",
        "--delay-min", "1s", "--delay-max", "2s", "--serve-flag=--max-queued-ops=100",
    )  # fmt: skip
    table = capsys.readouterr().out
    acc, send = fig["accounting"], fig["send"]
    assert acc["problems"] == []
    # Whether the fires met the 50 ms target depends on the machine's hour (a timed
    # figure, never a unit-test assertion); that the exit code follows the verdict does not.
    verdict = fig["overload"]
    assert verdict is not None and verdict["p999_ms"] == fig["fire_lateness_ms"]["p999"]
    assert code == (0 if verdict["met"] else 1)
    refused = send["errors"].get("send_RESOURCE_EXHAUSTED", 0)
    assert acc["sent"] + refused == send["planned"] == 12_000
    assert acc["lost"] == 0 and acc["acked"] == acc["sent"]
    assert fig["fire_lateness_ms"]["count"] > 0  # reported apart from send latency
    assert "- fire lateness (server) P50 / P99 / P999 / max" in table


def test_tdmq_thread_shape_sends_single_messages_batched_by_the_producer(tmp_path):
    """16 threads each send() one message at a time; the batching producer packs them."""
    server = start_server(tmp_path)
    try:
        code, fig, _ = run_loadtest(
            tmp_path, "--scenario", "tdmq-threads", "--target", server.target,
            "--rate", "1000", "--duration", "2s", "--delay-scale", "0.005", "--grace", "500ms",
        )  # fmt: skip
    finally:
        server.stop(grace_s=1.0)
    acc = fig["accounting"]
    assert code == 0, acc["problems"]
    assert fig["config"]["producer_threads"] == 16 and fig["config"]["batch"] == 1
    assert acc["sent"] == 2_000 == acc["acked"] and acc["lost"] == 0 and acc["early"] == 0
    assert fig["send"]["latency_us"]["count"] == 2_000  # one latency per single send


def test_cancel_scenario_against_a_running_server(tmp_path):
    server = start_server(tmp_path)
    try:
        code, fig, _ = run_loadtest(
            tmp_path, "--scenario", "cancel", "--target", server.target, "--rate", "1000",
            "--duration", "2s", "--delay-min", "1500ms", "--delay-max", "3s",
            "--grace", "1s", "--producers", "1",
        )  # fmt: skip
    finally:
        server.stop(grace_s=1.0)
    acc = fig["accounting"]
    assert code == 0, acc["problems"]
    assert acc["sent"] == 2_000 and 450 <= acc["cancelled"] <= 750  # 30% of 2,000
    assert acc["cancelled_delivered"] == 0 and acc["lost"] == 0
    assert acc["acked"] + acc["cancelled"] == acc["sent"] and acc["delivered"] == acc["acked"]
    assert fig["target"] == server.target


def test_a_server_that_fires_early_fails_the_run(tmp_path, capsys):
    server = start_server(tmp_path, skewed_clock(+5_000))  # believes it is 5 s later
    try:
        code, fig, _ = run_loadtest(
            tmp_path, "--scenario", "smoke", "--target", server.target, "--duration", "1s",
        )  # fmt: skip
    finally:
        server.stop(grace_s=1.0)
    acc = fig["accounting"]
    assert code == 1 and acc["early"] == acc["sent"] == 2_000
    assert "early=2000" in acc["problems"] and not fig["ok"]
    # Due 0.2..1.5 s after the send, fired at once: early by about the delay itself.
    assert 200 <= fig["early_ms"]["p50"] <= 1_500 and fig["early_ms"]["max"] <= 1_600
    report = capsys.readouterr().out
    assert "- result: FAILED: early=2000" in report
    assert "- interpreter (the harness's; the server dialled runs its own): " in report


def test_a_server_that_never_fires_fails_within_the_bounded_wait_all_late(tmp_path):
    server = start_server(tmp_path, skewed_clock(-3_600_000))  # believes it is 1 h earlier
    try:
        code, fig, _ = run_loadtest(
            tmp_path, "--scenario", "smoke", "--target", server.target, "--duration", "1s",
            "--drain-timeout", "1500ms",
        )  # fmt: skip
    finally:
        server.stop(grace_s=1.0)
    acc = fig["accounting"]
    # The dialled server still holds every message in the run's topics, scheduled:
    # late, not lost (nor a pass).
    assert code == 1 and acc["late"] == acc["sent"] == 2_000 and acc["acked"] == 0
    assert acc["lost"] == 0 and acc["problems"] == ["late=2000"]


def test_what_a_spawned_server_still_holds_is_late_not_lost(tmp_path, monkeypatch, capsys):
    # The spawned server believes it is 1 h earlier: nothing fires within the run, and
    # at the end it still holds every message, scheduled. Late, not lost (nor a pass).
    # With --keep-data its work dir stays, where the report says, to look into.
    config = tmp_path / "behind.toml"
    config.write_text("clock_offset_ms = -3600000\n")
    temp = tmp_path / "tmp"  # where the run makes its work dir
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    code, fig, _ = run_loadtest(
        tmp_path, "--scenario", "smoke", "--duration", "1s", "--drain-timeout", "1500ms",
        f"--serve-flag=--config={config}", "--keep-data",
    )  # fmt: skip
    acc = fig["accounting"]
    assert code == 1 and acc["late"] == acc["sent"] == 2_000 and acc["lost"] == 0
    assert acc["problems"] == ["late=2000"] and acc["balanced"]
    table = capsys.readouterr().out
    assert "- result: FAILED: late=2000" in table
    kept = Path(fig["server"]["kept_dir"])
    assert list(temp.iterdir()) == [kept] and f", kept in {kept}" in table
    assert (kept / "data" / "LOG").is_file()  # RocksDB's own log: stalls, compactions
    assert "server_started" in (kept / "server.log").read_text()


def run_behind_schedule(tmp_path: Path, count: int, overrun_ms: int) -> tuple[int, dict, dict]:
    """`count` unary sends, one in flight, offered at 1,000,000/s: behind schedule on any
    machine; (exit code, send figures, accounting)."""
    server = start_server(tmp_path)
    try:
        code, fig, _ = run_loadtest(
            tmp_path, "--scenario", "smoke", "--target", server.target, "--batch", "1",
            "--rate", "1000000", "--count", str(count), "--producers", "1",
            "--max-outstanding", "1", "--send-overrun", f"{overrun_ms}ms",
        )  # fmt: skip
    finally:
        server.stop(grace_s=1.0)
    return code, fig["send"], fig["accounting"]


def test_producers_still_behind_after_the_overrun_are_stopped_and_the_run_fails(tmp_path):
    # 100,000 unary sends one at a time cannot be done in the 0.1 s the rate plans for,
    # nor in the 2 s overrun allowed after it.
    code, send, acc = run_behind_schedule(tmp_path, count=100_000, overrun_ms=2_000)
    assert code == 1 and send["producers_stopped_behind"] == 1 and not send["rate_reached"]
    assert 0 < send["sent"] < 100_000 and acc["lost"] == 0 and acc["balanced"]
    assert any("stopped at the end of the send phase" in p for p in acc["problems"])


def test_a_fill_behind_schedule_sends_everything_within_its_overrun(tmp_path):
    # backlog's case: the count is what the run measures, so a rate not reached is
    # reported, and the run passes once every message is stored
    code, send, acc = run_behind_schedule(tmp_path, count=2_000, overrun_ms=60_000)
    assert code == 0, acc["problems"]
    assert send["sent"] == acc["acked"] == 2_000 and send["producers_stopped_behind"] == 0
    assert not send["rate_reached"] and send["rate_achieved"] < 1_000_000


def test_no_server_at_the_target_fails_within_a_bound(tmp_path, capsys):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    started = time.monotonic()
    code = main(["loadtest", "--scenario", "smoke", "--target", f"127.0.0.1:{port}", *QUIET])
    assert code == 1 and time.monotonic() - started < 40
    assert f"no timerwheel server answers at 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_spawned_server_that_fails_to_start_leaves_no_work_dir(tmp_path, monkeypatch, capsys):
    temp = tmp_path / "tmp"  # where the run makes its work dir (the spawned data dir)
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    before = child_pids()
    code = main(["loadtest", "--scenario", "smoke", "--serve-flag=--set=max_subscribers=0",
                 *QUIET])  # fmt: skip
    assert code == 1
    err = capsys.readouterr().err
    assert "timerwheel serve did not start" in err
    assert "max_subscribers=0" in err  # the end of its log says why; the log itself is gone
    assert list(temp.iterdir()) == []
    assert leftover_processes(before) == []


def test_usage_errors_exit_2_before_anything_runs(capsys):
    assert main(["loadtest", "--scenario", "smoke", "--target", "10.1.2.3:7070"]) == 2
    assert "not a loopback address" in capsys.readouterr().err
    assert main(["loadtest", "--scenario", "smoke", "--body-bytes", "3"]) == 2
    assert "body_bytes=3" in capsys.readouterr().err


# Bounds for a machine whose cores other work fills (CI runs Spark beside these tests):
# what they bound is an end, not a speed.
SIGNAL_TEST_BOUND_S = 120


@pytest.mark.timeout(4 * SIGNAL_TEST_BOUND_S)
def test_sigterm_mid_run_stops_everything_and_removes_the_data_dir(tmp_path):
    temp = tmp_path / "tmp"  # where the run makes its work dir (the spawned data dir)
    with _run_in_progress(temp) as (run, started):
        run.send_signal(signal.SIGTERM)
        assert run.wait(timeout=SIGNAL_TEST_BOUND_S) == 143
    assert "stopped by SIGTERM" in run.stderr.read()
    assert list(temp.iterdir()) == []  # the work dir and its data dir are gone
    _, alive = psutil.wait_procs(started, timeout=SIGNAL_TEST_BOUND_S)  # reaped by the run
    assert alive == []


@pytest.mark.timeout(4 * SIGNAL_TEST_BOUND_S)
def test_sigterm_to_the_run_s_process_group_stops_everything(tmp_path):
    # What `timeout`, `kill -- -PGID` and a CI runner's cancel send: SIGTERM to every
    # process of the run at once, its producers and consumers in the middle of waiting on
    # the run's shared events, the harness about to set them.
    # The server runs here, outside the group, so that the signal finds the run sending.
    server = start_server(tmp_path)
    try:
        with _run_in_progress(tmp_path / "tmp", "--target", server.target) as (run, started):
            deadline = time.monotonic() + SIGNAL_TEST_BOUND_S
            # Sends arriving: the producers and the consumer are past the start, waiting.
            while not server.engine.topics():
                assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
                time.sleep(0.05)
            os.killpg(run.pid, signal.SIGTERM)
            assert run.wait(timeout=SIGNAL_TEST_BOUND_S) == 143
    finally:
        server.stop(grace_s=1.0)
    assert "stopped by SIGTERM" in run.stderr.read()
    _, alive = psutil.wait_procs(started, timeout=SIGNAL_TEST_BOUND_S)
    assert alive == []


@pytest.mark.timeout(4 * SIGNAL_TEST_BOUND_S)
def test_a_sigkilled_run_leaves_no_process_behind(tmp_path):
    with _run_in_progress(tmp_path / "tmp") as (run, started):
        run.kill()  # nothing of the run's own code runs after this
        run.wait(timeout=10)
    names = {command_line(process) for process in started}
    assert any("timerwheel.cli.main serve" in name for name in names), names
    # The server gets SIGTERM from the kernel and stops; producers and consumers are
    # killed with their parent (PR_SET_PDEATHSIG).
    _, alive = psutil.wait_procs(started, timeout=SIGNAL_TEST_BOUND_S)
    left = [command_line(process) for process in alive]
    for process in alive:  # a failing run must not leave them to the next tests
        process.kill()
    assert left == []


@contextlib.contextmanager
def _run_in_progress(temp: Path, *target: str):
    """A `timerwheel loadtest` process, once its server is up and its producers and
    consumers are started, and the processes it started; killed if still running after.
    With a `--target` (the server runs elsewhere) the run leads a process group of its
    own, which the caller may signal as a whole."""
    temp.mkdir()
    run = subprocess.Popen(
        [sys.executable, "-m", "timerwheel.cli.main", "loadtest", "--scenario", "smoke",
        "--duration",
         "60s", *target, *QUIET],
        cwd=Path(__file__).resolve().parents[2], env={**os.environ, "TMPDIR": str(temp)},
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        start_new_session=bool(target),
    )  # fmt: skip
    try:
        deadline = time.monotonic() + SIGNAL_TEST_BOUND_S
        while sum("spawn_main" in command_line(c) for c in descendants(run.pid)) < 3:
            # the server is up once the producer (2) and consumer processes start
            assert run.poll() is None and time.monotonic() < deadline, run.stderr.read()
            time.sleep(0.05)
        assert bool(target) or list(temp.glob("*/data"))  # a spawned server's data dir
        yield run, descendants(run.pid)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
