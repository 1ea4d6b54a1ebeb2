"""The Spark session of the capacity report, with the ``timerwheel_sst`` source registered.

Workers must run this project's interpreter (``PYSPARK_PYTHON=sys.executable``) and be
able to import the data source: locally the project is installed, and for a cluster
(``--master``) the pure-Python packages it needs (capacity, store, wheels) are shipped
as one zip with ``addPyFile``. rocksdict and pyarrow must be installed on the workers.
"""

from __future__ import annotations

import atexit
import functools
import importlib
import os
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path
from urllib.parse import urlsplit

from pyspark.sql import SparkSession

from timerwheel.capacity.datasource import TimerwheelSstDataSource

# What the workers import: the report's rooms and the two modules of the root package
# they build on (the root's __init__ loads nothing else until asked).
SHIPPED_PACKAGES = ("timerwheel.capacity", "timerwheel.store", "timerwheel.wheels")
SHIPPED_MODULES = ("timerwheel", "timerwheel.common", "timerwheel.durations")
DEFAULT_MASTER = "local[*]"


def build_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "timerwheel-capacity",
    conf: dict[str, str] | None = None,
):
    """A session for `master`, without a UI; `conf` overrides any setting (e.g.
    ``spark.executor.memory``). A local session, or one whose master is on this machine's
    loopback, binds the driver to 127.0.0.1 too."""
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        .config("spark.driver.memory", "4g")
    )
    if master.startswith("local") or _on_loopback(master):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # loopback only
        # Few, small shuffles: the default 200 partitions would be 200 tiny tasks each.
        builder = builder.config("spark.sql.shuffle.partitions", "8")
        builder = builder.config("spark.driver.host", "127.0.0.1")
        builder = builder.config("spark.driver.bindAddress", "127.0.0.1")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    prepare_session(spark, ship_code=not master.startswith("local"))
    return spark


def _on_loopback(master: str) -> bool:
    """spark://127.0.0.1:7077 or spark://localhost:7077: a cluster on this machine."""
    host = urlsplit(master).hostname or ""
    return host == "localhost" or host.startswith("127.")


def build_remote_session(remote: str, conf: dict[str, str] | None = None):
    """A Spark Connect session (``sc://HOST:PORT``): the data source is registered over
    the connection and this project's code shipped as a Python artifact; the server's
    workers need rocksdict and pyarrow installed, as a cluster's do."""
    builder = SparkSession.builder.remote(remote).config("spark.sql.session.timeZone", "UTC")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.dataSource.register(TimerwheelSstDataSource)
    spark.addArtifacts(_code_zip(), pyfile=True)
    return spark


def prepare_session(spark: SparkSession, *, ship_code: bool = False) -> None:
    """Register the data source (and ship this project's code for remote workers)."""
    spark.dataSource.register(TimerwheelSstDataSource)
    if ship_code:
        spark.sparkContext.addPyFile(_code_zip())


@functools.cache
def _code_zip() -> str:
    """A zip of the packages the workers import, built from the running code: once a
    process, and removed when the process exits (Spark serves an added file from its
    path for as long as the session lives, so it cannot go sooner)."""
    directory = tempfile.mkdtemp(prefix="timerwheel-code-")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    path = os.path.join(directory, "timerwheel_capacity.zip")
    with zipfile.ZipFile(path, "w") as archive:
        for name in SHIPPED_MODULES:
            source = Path(importlib.import_module(name).__file__ or "")
            folder = name.replace(".", "/")
            archive.write(
                source, f"{folder}/__init__.py" if name == "timerwheel" else f"{folder}.py"
            )
        for name in SHIPPED_PACKAGES:
            # Each room's folder, wherever it is installed (in the repo, an editable install
            # maps `timerwheel.store` to the top-level `store/`).
            package_dir = Path(importlib.import_module(name).__path__[0])
            folder = name.replace(".", "/")
            for source in sorted(package_dir.rglob("*.py")):
                archive.write(source, f"{folder}/{source.relative_to(package_dir).as_posix()}")
    return path
