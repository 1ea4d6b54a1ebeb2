"""`timerwheel local-cluster`: a cluster on this machine, to try cluster mode.

    timerwheel local-cluster                        # 3 nodes, 3 NATS servers, 6 partitions
    timerwheel local-cluster --nodes 3 --partitions 12 --port 7071 --dir /tmp/tw
    timerwheel local-cluster --nodes 2 --serve-flag=--auth-tokens=tokens.toml

It starts the NATS JetStream servers (the pinned `nats-server` of the `cluster` extra, each
fsyncing before it acknowledges) and one `timerwheel serve --cluster` node a server, all on
127.0.0.1, waits until every partition has an owner, prints each node's address, and
runs until Ctrl-C or SIGTERM, which stop every process it started (so does its own death:
each child dies with it). `--dir` keeps the data (NATS's stores and each node's) and the
logs; without it they go in a temporary directory removed at the end. `DIR/cluster.json`
lists what runs (addresses, NATS URLs, pids, logs) for scripts. It exits 1 when a process
it started exits on its own, naming it and the end of its log.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from timerwheel.procs.lifecycle import SignalStop
from timerwheel.procs.local_cluster import LocalCluster, LocalClusterError

POLL_S = 0.5


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "local-cluster",
        help="run a cluster on this machine (NATS servers and nodes) until Ctrl-C",
        description=__doc__.split("\n\n", 2)[2] if __doc__ else None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--nodes", type=int, default=3, help="timerwheel nodes (default 3)")
    parser.add_argument(
        "--nats", type=int, default=3, choices=(1, 3, 5),
        help="NATS servers: the log's replicas are min(this, 3) (default 3)",
    )  # fmt: skip
    parser.add_argument("--partitions", type=int, default=6, help="partition count (default 6)")
    parser.add_argument(
        "--port", type=int, default=7071,
        help="the first node's gRPC port, the others following it; 0 for free ports "
        "(default 7071)",
    )  # fmt: skip
    parser.add_argument("--dir", type=Path, help="keep data and logs here (default: temporary)")
    parser.add_argument(
        "--serve-flag", action="append", default=[], metavar="FLAG",
        help="a flag for every node's `serve`, e.g. --serve-flag=--metrics-port=0 (repeatable)",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true", help="print the status as one JSON line")
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    base = args.dir or Path(tempfile.mkdtemp(prefix="timerwheel-cluster-"))
    stop = SignalStop()  # a handler may run inside the wait on it: no Event (its lock)
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        cluster = LocalCluster(
            base, nodes=args.nodes, partitions=args.partitions, nats=args.nats,
            port=args.port, serve_flags=tuple(args.serve_flag),
        )  # fmt: skip
    except ValueError as error:
        print(f"timerwheel local-cluster: {error}", file=sys.stderr)
        return 2
    try:
        with cluster:
            _print_ready(cluster, base, args.json)
            while not stop.wait(POLL_S):
                exited = cluster.first_exited()
                if exited is not None:
                    print(
                        f"timerwheel local-cluster: {exited.name} ({' '.join(exited.args[:2])}) "
                        f"exited; the end of its log:\n{exited.tail()}",
                        file=sys.stderr,
                    )
                    return 1
            print("stopping the nodes, then the NATS servers", file=sys.stderr)
    except LocalClusterError as error:
        print(f"timerwheel local-cluster: {error}", file=sys.stderr)
        return 1
    finally:
        stop.close()
        if args.dir is None:
            shutil.rmtree(base, ignore_errors=True)
    return 0


def _print_ready(cluster: LocalCluster, base: Path, as_json: bool) -> None:
    status = cluster.status()
    if as_json:
        print(json.dumps(status), flush=True)
        return
    owned = cluster.ownership()
    print(
        f"{len(status['nodes'])} nodes, {status['partitions']} partitions, log replicas "
        f"{status['replicas']} (data and logs in {base})"
    )
    for node in status["nodes"]:
        partitions = ",".join(map(str, owned.get(node["name"], []))) or "-"
        print(f"  {node['name']}  {node['target']}  pid {node['pid']}  owns {partitions}")
    print(f"  NATS: {','.join(s['url'] for s in status['nats'])}")
    first = status["nodes"][0]["target"]
    print(f"try: timerwheel send --target {first} --topic orders --delay 5s --body hello")
    print("Ctrl-C stops everything.", flush=True)
