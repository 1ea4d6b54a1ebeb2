"""A real `timerwheel serve` subprocess whose JSON log lines are parsed as they come.

Every process started is killed (with its children) by `kill`; the conftest fixture
`serve_process` calls it at the end of each test.
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
from collections.abc import Sequence
from pathlib import Path

import psutil

from helpers.waits import WAIT_S
from timerwheel.client import TimerClient

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")


class ServeProcess:
    """`timerwheel serve --port 0` as a subprocess; its JSON log lines are parsed as they come."""

    def __init__(
        self, data_dir: Path, *extra: str, tmp_dir: str | None = None, start_s: float = 30,
        host: str = "127.0.0.1", prefix: Sequence[str] = (),
    ) -> None:  # fmt: skip
        """`prefix` runs it elsewhere (`ip netns exec NS`, which execs: the pid stays the
        server's), listening on `host`."""
        self.args = [
            *prefix, TIMERWHEEL, "serve", "--data-dir", str(data_dir), "--host", host,
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
            started = self.wait_event("server_started", timeout_s=start_s)
        except BaseException:
            self.kill()
            raise
        self.port = int(started["port"])
        self.target = f"{host}:{self.port}"
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
        """SIGKILL the server; its children die with it (timerwheel.procs.lifecycle), waited
        for here so the next start finds RocksDB's lock free; then remove its temporary files."""
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
