"""`timerwheel loadtest --target` through a crash of the server's gRPC workers.

A `serve --workers 2` has each of its worker processes SIGKILLed in the middle of a run
(its supervisor restarts them); whichever worker carried a consumer's stream took it
along. What must hold: the consumers subscribe again and receive what the dead stream
held un-acked (delivered again), so nothing is lost; the report keeps lost apart from
late (what the server still held at the end, scheduled or fired and un-acked).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import psutil
import pytest

from timerwheel.cli.main import main

# system: a `serve --workers 2` process tree, SIGKILLed workers, load worker processes
pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]


def _sending(client, deadline_s: float) -> bool:
    """True once the run's topics hold messages: the producers are past their start."""
    while time.monotonic() < deadline_s:
        if any(t.topic.startswith("lt-") for t in client.topics()):
            return True
        time.sleep(0.05)
    return False


def _restarted(server, victim: str, old_pid: int, timeout_s: float) -> int | None:
    """The new pid of `victim` once its supervisor logged restarting it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for event in list(server.events):
            if (
                event.get("event") == "child_restarted"
                and event.get("child") == victim
                and event.get("pid") != old_pid
            ):
                return event["pid"]
        time.sleep(0.05)
    return None


def _kill_each_worker(server, done: dict) -> None:
    """Once the run sends, SIGKILL each gRPC worker in turn, waiting for its restart:
    whichever one carries the consumer's streams dies."""
    try:
        with server.client() as client:
            if not _sending(client, time.monotonic() + 60):
                done["error"] = "the run never started sending"
                return
        for victim in ("worker-0", "worker-1"):
            time.sleep(1.0)
            old_pid = server.children[victim]
            psutil.Process(old_pid).kill()
            new_pid = _restarted(server, victim, old_pid, timeout_s=60)
            if new_pid is None:
                done["error"] = f"{victim} was not restarted"
                return
            server.children[victim] = new_pid
            done.setdefault("killed", []).append(victim)
    except Exception as exc:  # reported by the test, not lost in the thread
        done["error"] = repr(exc)


def test_a_run_through_sigkilled_workers_loses_nothing(tmp_path: Path, serve_process, capsys):
    server = serve_process(tmp_path / "data", "--workers", "2")
    out = tmp_path / "figures.json"
    done: dict = {}
    killer = threading.Thread(target=_kill_each_worker, args=(server, done), daemon=True)
    killer.start()
    # The harness runs on the main thread: it turns SIGTERM into an unwind.
    code = main([
        "loadtest", "--scenario", "smoke", "--target", server.target, "--rate", "500",
        "--duration", "8s", "--delay-min", "200ms", "--delay-max", "1500ms",
        "--drain-timeout", "30s", "--no-progress", "--json", str(out),
    ])  # fmt: skip
    killer.join(timeout=130)
    assert not killer.is_alive() and "error" not in done, done
    assert done["killed"] == ["worker-0", "worker-1"]

    fig = json.loads(out.read_text())
    acc = fig["accounting"]
    assert acc["lost"] == 0, acc["problems"]
    assert fig["delivery"]["resubscribed"] >= 1  # a stream died with its worker
    assert acc["sent"] >= 1_000
    assert code == 0, acc["problems"]
    report = capsys.readouterr().out
    assert "- lost / duplicated / early: 0 / " in report
    assert "still held by the server (scheduled, or fired and un-acked): late, not lost" in report
    assert "- consumer streams subscribed again after an error / acks of unknown outcome: " in (
        report
    )
