"""Start a Spark standalone cluster on this machine's loopback to try the report on.

    .venv/bin/python deploy/spark_local_cluster.py [--workers 2] [--cores 1] [--memory 1g]

Prints the master URL, e.g. ``spark://127.0.0.1:41233``, then keeps the master and the
workers running until Ctrl-C (or SIGTERM), when it stops every one of them. Meanwhile:

    timerwheel report --input EXPORT --out REPORT --master spark://127.0.0.1:41233 \\
                      --conf spark.executor.memory=512m

Logs and work dirs go to a new temporary directory (printed), removed on exit unless
--keep-logs.
"""

from __future__ import annotations

import argparse
import shutil
import signal
import sys
import tempfile

from timerwheel.capacity.local_cluster import LocalSparkCluster
from timerwheel.procs.lifecycle import SignalStop


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--cores", type=int, default=1, help="cores per worker")
    parser.add_argument("--memory", default="1g", help="memory per worker (executors fit in it)")
    parser.add_argument("--keep-logs", action="store_true")
    args = parser.parse_args()
    work_dir = tempfile.mkdtemp(prefix="timerwheel-spark-")
    stop = SignalStop()  # a handler may run inside the wait on it
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    cluster = LocalSparkCluster(
        work_dir, workers=args.workers, cores=args.cores, memory=args.memory
    )
    try:
        with cluster:
            print(cluster.master_url, flush=True)
            print(f"logs and work dirs: {work_dir}; Ctrl-C stops the cluster", file=sys.stderr)
            stop.wait()
    except KeyboardInterrupt:
        pass
    finally:
        if not args.keep_logs:
            shutil.rmtree(work_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
