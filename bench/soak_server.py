"""The soak's server: `timerwheel serve --workers N` on one data dir and one port.

Its log is read on a thread for the children's pids (`server_started`, `child_restarted`);
`kill("supervisor")` SIGKILLs the whole server and starts it again on the same data dir
and port, `kill(<child>)` waits for the supervisor to restart that child.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil

from timerwheel.procs.lifecycle import die_with_parent

START_S = 90.0


class Server:
    """`timerwheel serve --workers N` on one data dir and one port, started again after a
    SIGKILL of its supervisor. Its log is read on a thread for the children's pids."""

    def __init__(self, work_dir: Path, workers: int) -> None:
        with socket.socket() as probe:  # a free port, kept across restarts
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.args = [
            sys.executable, "-m", "timerwheel.cli.main", "serve",
            "--data-dir", str(work_dir / "data"), "--host", "127.0.0.1",
            "--port", str(self.port), "--workers", str(workers), "--log-format", "json",
        ]  # fmt: skip
        self.log_path = work_dir / "server.log"
        self.proc: subprocess.Popen | None = None
        self.children: dict[str, int] = {}
        self._cond = threading.Condition()
        self._events: list[dict] = []

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        self._events = []
        self.proc = subprocess.Popen(
            self.args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=lambda: die_with_parent(signal.SIGKILL),
        )  # fmt: skip
        threading.Thread(target=self._read, args=(self.proc,), daemon=True).start()
        started = self._wait(lambda e: e.get("event") == "server_started", START_S)
        if started is None:
            raise RuntimeError(f"the server did not start within {START_S:g} s: {self.log_path}")
        self.children = {name: int(pid) for name, pid in started.get("pids", {}).items()}

    def _read(self, proc: subprocess.Popen) -> None:
        assert proc.stdout is not None
        with open(self.log_path, "a") as out:
            for line in proc.stdout:
                out.write(line)
                with contextlib.suppress(json.JSONDecodeError), self._cond:
                    event = json.loads(line)
                    if isinstance(event, dict):
                        self._events.append(event)
                        self._cond.notify_all()

    def _wait(self, match, timeout_s: float) -> dict | None:
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                found = next((e for e in self._events if match(e)), None)
                left = deadline - time.monotonic()
                if found is not None or left <= 0:
                    return found
                self._cond.wait(left)

    def pids(self) -> list[int]:
        if self.proc is None:
            return []
        with contextlib.suppress(psutil.Error):
            parent = psutil.Process(self.proc.pid)
            return [parent.pid, *(c.pid for c in parent.children(recursive=True))]
        return []

    def rss_by_process(self) -> dict[str, int]:
        """RSS bytes of the supervisor and of each child, by name (0 for one not running)."""
        assert self.proc is not None
        named = {"supervisor": self.proc.pid, **self.children}
        return {
            name: (process.memory_info().rss if (process := _process(pid)) else 0)
            for name, pid in named.items()
        }

    def kill(self, victim: str) -> None:
        """SIGKILL `victim` ("supervisor" or a child's name) and wait until it is back."""
        assert self.proc is not None
        if victim == "supervisor":
            old = self.pids()
            self.proc.kill()
            self.proc.wait(timeout=30)
            psutil.wait_procs([p for p in map(_process, old) if p is not None], timeout=30)
            self.start()
            return
        old_pid = self.children[victim]
        os.kill(old_pid, signal.SIGKILL)
        back = self._wait(
            lambda e: e.get("event") == "child_restarted" and e.get("child") == victim
            and e.get("pid") != old_pid, START_S,
        )  # fmt: skip
        if back is None:
            raise RuntimeError(f"{victim} was not restarted within {START_S:g} s")
        self.children[victim] = int(back["pid"])

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _process(pid: int) -> psutil.Process | None:
    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid)
    return None
