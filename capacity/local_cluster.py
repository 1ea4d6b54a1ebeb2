"""A real Spark standalone cluster on this machine: one master and N workers, on loopback.

    with LocalSparkCluster(workers=2, work_dir="/tmp/spark") as cluster:
        run_report(ReportRequest(export, out, master=cluster.master_url))

Started from the installed pyspark (``bin/spark-class org.apache.spark.deploy.master.Master``
and ``...worker.Worker``), every process bound to 127.0.0.1 on ports the OS picks (the
master's URL is read from its log), logs and work dirs under `work_dir`. Each process is
started in a process group of its own, and `stop` ends the whole group (the worker's
executors and their Python workers included): SIGTERM, then SIGKILL after a bounded wait.
Start-up is bounded too: a process that has not logged that it is ready within
`start_timeout_s` stops the cluster and raises.

It is what the tests run a report against, and what ``deploy/spark_local_cluster.py``
starts for a user who wants to try ``timerwheel report --master spark://...``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyspark

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_MASTER_URL = re.compile(r"Starting Spark master at (spark://\S+)")
_REGISTERED = "Successfully registered with master"
CONNECT_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
_CONNECT_URL = re.compile(r"Spark Connect server started at: (127\.0\.0\.1:\d+)")
POLL_S = 0.1  # how often a start-up waits re-reads a log (the wait itself is bounded)


class ClusterError(RuntimeError):
    """The cluster did not come up; the message quotes the log that says why."""


class LocalSparkCluster:
    """Master + `workers` workers of `cores` cores and `memory` each, on 127.0.0.1."""

    def __init__(
        self,
        work_dir: str,
        *,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        start_timeout_s: float = 90.0,
        stop_timeout_s: float = 15.0,
    ) -> None:
        if workers < 1 or cores < 1:
            raise ValueError(f"workers={workers}, cores={cores}: both must be >= 1")
        self.work_dir = Path(work_dir)
        self.workers = workers
        self.cores = cores
        self.memory = memory
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.master_url: str | None = None
        self.connect_url: str | None = None
        self._processes: list[subprocess.Popen] = []

    def __enter__(self) -> LocalSparkCluster:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def start(self) -> LocalSparkCluster:
        """Start the master, then the workers; returns once every worker has registered."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        try:
            master_log = self._launch(
                "master", MASTER_CLASS, "--host", "127.0.0.1", "--port", "0", "--webui-port", "0"
            )
            match = self._wait_for(master_log, _MASTER_URL.pattern, self._processes[0])
            self.master_url = match.group(1)
            started = []
            for index in range(self.workers):  # all at once: each JVM takes seconds to start
                worker_dir = self.work_dir / f"worker-{index}"
                worker_dir.mkdir(exist_ok=True)
                log_path = self._launch(
                    f"worker-{index}", WORKER_CLASS,
                    "--host", "127.0.0.1", "--port", "0", "--webui-port", "0",
                    "--cores", str(self.cores), "--memory", self.memory,
                    "--work-dir", str(worker_dir), self.master_url,
                )  # fmt: skip
                started.append((log_path, self._processes[-1]))
            for log_path, process in started:
                self._wait_for(log_path, re.escape(_REGISTERED), process)
        except BaseException:
            self.stop()
            raise
        return self

    def start_connect(self, master: str = "local[2]") -> str:
        """Start a Spark Connect server (its driver on `master`) on 127.0.0.1 and a port the
        OS picks; returns its ``sc://127.0.0.1:PORT``. `stop` ends it with the rest."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        log_path = self._launch(
            "connect", None, "--class", CONNECT_CLASS, "--master", master,
            "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
            "--conf", "spark.connect.grpc.binding.port=0",
            "--conf", "spark.driver.host=127.0.0.1", "--conf", "spark.driver.bindAddress=127.0.0.1",
            "--conf", "spark.ui.enabled=false", "--conf", "spark.driver.memory=1g",
        )  # fmt: skip
        try:
            match = self._wait_for(log_path, _CONNECT_URL.pattern, self._processes[-1])
        except BaseException:
            self.stop()
            raise
        self.connect_url = f"sc://{match.group(1)}"
        return self.connect_url

    def stop(self) -> None:
        """End every process group, workers first; SIGKILL what outlives the timeout."""
        for process in reversed(self._processes):
            _signal_group(process, signal.SIGTERM)
        deadline = time.monotonic() + self.stop_timeout_s
        for process in reversed(self._processes):
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=max(0.1, deadline - time.monotonic()))
            # Executors and Python workers are in the group too: make sure none is left.
            _signal_group(process, signal.SIGKILL)
            process.wait()
        for process in self._processes:
            _wait_group_gone(process.pid, deadline + self.stop_timeout_s)
        self._processes.clear()

    def _launch(self, name: str, main_class: str | None, *args: str) -> Path:
        """Start `main_class` with spark-class, or spark-submit when it is None."""
        log_path = self.work_dir / f"{name}.log"
        spark_home = os.path.dirname(pyspark.__file__)
        env = {
            **os.environ,
            "SPARK_HOME": spark_home,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_LOCAL_DIRS": str(self.work_dir / "local"),
            "SPARK_LOG_DIR": str(self.work_dir),
            "SPARK_WORKER_DIR": str(self.work_dir),
            "PYSPARK_PYTHON": sys.executable,
            # The REST submission server would take the fixed port 6066.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        }
        if main_class is None:
            command = [os.path.join(spark_home, "bin", "spark-submit"), *args]
        else:
            command = [os.path.join(spark_home, "bin", "spark-class"), main_class, *args]
            # The daemons are small: a JVM default heap would take a quarter of the RAM.
            env["SPARK_DAEMON_MEMORY"] = "256m"
        with open(log_path, "wb") as log:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                cwd=self.work_dir,
                start_new_session=True,  # its own process group, ended as one in stop()
            )
        self._processes.append(process)
        return log_path

    def _wait_for(self, log_path: Path, pattern: str, process: subprocess.Popen) -> re.Match:
        """Wait (bounded) until `pattern` appears in the log; fail fast if the process dies."""
        deadline = time.monotonic() + self.start_timeout_s
        compiled = re.compile(pattern)
        while True:
            text = log_path.read_text(errors="replace")
            match = compiled.search(text)
            if match:
                return match
            if process.poll() is not None:
                raise ClusterError(
                    f"{log_path.name}: exited with {process.returncode} before it was ready:\n"
                    + _tail(text)
                )
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"{log_path.name}: not ready after {self.start_timeout_s:.0f} s:\n"
                    + _tail(text)
                )
            time.sleep(POLL_S)


def _signal_group(process: subprocess.Popen, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):  # the whole group has already exited
        os.killpg(process.pid, signum)


def _wait_group_gone(group: int, deadline: float) -> None:
    """Wait (bounded) until no process of the group is left, zombies included: a killed
    worker's executors are re-parented and reaped by init a moment later."""
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(POLL_S)
    raise ClusterError(f"process group {group} still has processes after SIGKILL")


def _tail(text: str, lines: int = 20) -> str:
    return "\n".join(text.splitlines()[-lines:])
