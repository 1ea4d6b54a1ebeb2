"""The capacity report on a real Spark standalone cluster (master + two workers on loopback).

The cluster (timerwheel.capacity.local_cluster) is started once for the module from the installed
pyspark; `timerwheel report --master spark://127.0.0.1:PORT` runs as a user would run it,
so the code is shipped to the workers (its zip removed when the command ends), the data
source runs in the executors' Python workers and the report is written from the
cluster's results. Its tables must equal those
of the same command on `local[2]`, table by table, and every process of the cluster must
be gone afterwards.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from helpers.capacity_data import build_and_export

from timerwheel.capacity.local_cluster import LocalSparkCluster

# system: a Spark standalone cluster (JVMs)
# two JVM clusters' worth of start-up on a busy machine
pytestmark = [pytest.mark.system, pytest.mark.timeout(900)]
SMALL_EXECUTOR = ["--conf", "spark.executor.memory=512m", "--conf", "spark.driver.memory=1g"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    work_dir = tmp_path_factory.mktemp("spark-cluster")
    cluster = LocalSparkCluster(str(work_dir), workers=2, cores=1, memory="768m")
    cluster.start()
    groups = [process.pid for process in cluster._processes]
    try:
        yield cluster
    finally:
        cluster.stop()
        for group in groups:  # no orphan: not the daemons, nor their executors
            with pytest.raises(ProcessLookupError):
                os.killpg(group, 0)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    return build_and_export(tmp_path_factory.mktemp("cluster-data"), max_rows_per_file=600)


@pytest.fixture(scope="module")
def connect_server(tmp_path_factory):
    """A Spark Connect server (its driver on local[2]), started from the installed pyspark."""
    server = LocalSparkCluster(str(tmp_path_factory.mktemp("spark-connect")))
    server.start_connect("local[2]")
    group = server._processes[0].pid
    try:
        yield server
    finally:
        server.stop()
        with pytest.raises(ProcessLookupError):
            os.killpg(group, 0)


@pytest.fixture(scope="module")
def local_tables(exported, tmp_path_factory):
    """The same command's tables on local[2]: what every other engine must reproduce."""
    out_dir = str(tmp_path_factory.mktemp("local") / "report")
    done = _report(exported[0], out_dir, "--master", "local[2]")
    assert done.returncode == 0, done.stderr[-3000:]
    return _tables(out_dir)


def _report(
    export_dir: str, out_dir: str, *engine: str, tmp_dir: str | None = None
) -> subprocess.CompletedProcess:
    command = [
        sys.executable, "-m", "timerwheel.cli.main", "report", "--input", export_dir, "--out",
        out_dir,
        *engine, "--drain-rate", "500", "--top-seconds", "5", *SMALL_EXECUTOR,
    ]  # fmt: skip
    env = {**os.environ, "TMPDIR": tmp_dir} if tmp_dir else None
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, check=False, env=env
    )


def _tables(out_dir: str) -> dict:
    tables_dir = os.path.join(out_dir, "tables")
    return {
        name.removesuffix(".parquet"): pq.read_table(os.path.join(tables_dir, name))
        for name in sorted(os.listdir(tables_dir))
        if name.endswith(".parquet")
    }


def test_report_on_the_cluster_equals_the_local_run(cluster, exported, local_tables, tmp_path):
    export_dir, truth = exported
    tmp_dir = tmp_path / "tmp"
    tmp_dir.mkdir()
    on_cluster = _report(
        export_dir, str(tmp_path / "cluster"), "--master", cluster.master_url,
        tmp_dir=str(tmp_dir),
    )  # fmt: skip
    assert on_cluster.returncode == 0, on_cluster.stderr[-3000:]
    # The zip of the code shipped to the workers goes when the command ends.
    assert [p.name for p in tmp_dir.iterdir() if p.name.startswith("timerwheel-code-")] == []

    got = _tables(str(tmp_path / "cluster"))
    assert got.keys() == local_tables.keys()
    assert {"due_per_hour", "due_per_minute", "peak_seconds", "topics"} <= got.keys()
    for name, table in local_tables.items():
        assert got[name].equals(table), name
    # Not two equally wrong runs: the cluster's counts are the known truth.
    assert sum(got["due_per_hour"]["timers"].to_pylist()) == len(truth.pending())
    # The cluster really ran it: the application ran executors on both workers.
    app_dirs = [
        entry
        for worker in ("worker-0", "worker-1")
        for entry in os.listdir(cluster.work_dir / worker)
        if entry.startswith("app-")
    ]
    assert len(app_dirs) >= 2, app_dirs


def test_report_over_spark_connect_equals_the_local_run(
    connect_server, exported, local_tables, tmp_path
):
    """`--remote sc://...`: the Python Data Source registered over Spark Connect, the code
    shipped as an artifact, the job run by the server."""
    export_dir, truth = exported
    remote = _report(export_dir, str(tmp_path / "connect"), "--remote", connect_server.connect_url)
    assert remote.returncode == 0, remote.stderr[-3000:]
    assert f"connecting to Spark Connect at {connect_server.connect_url}" in remote.stderr
    got = _tables(str(tmp_path / "connect"))
    assert got.keys() == local_tables.keys()
    for name, table in local_tables.items():
        assert got[name].equals(table), name
    assert sum(got["due_per_hour"]["timers"].to_pylist()) == len(truth.pending())
