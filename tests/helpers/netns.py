"""Machines as Linux network namespaces, for the cluster fault suite: each namespace holds
one nats-server and one `timerwheel serve --cluster` node, and a machine can be cut off the
network and healed.

Layout: a bridge in the test's own namespace with the subnet's last address, and per
machine a namespace whose `eth0` is one end of a veth pair, the other end enslaved to the
bridge. The test process reaches every machine over the bridge (its producers, consumers and
the NATS monitoring calls); the machines reach each other through it. Cutting a machine
sets its `eth0` down inside its namespace: it loses every peer (NATS routes, the other
nodes, the test's clients) and keeps only its own addresses, as a machine with a pulled
cable would.

Every name carries a random token, so parallel runs and the leftovers of a killed run never
clash; the subnet is chosen among those no route of this namespace uses yet. `close()`
kills and waits every process still inside the namespaces (also those the test lost track
of), then deletes the host-side veths, the namespaces and the bridge: it is always called
(`Machines` is a context manager), also after a failed test.
"""

from __future__ import annotations

import contextlib
import os
import random
import secrets
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field

OFF_ENV = "TIMERWHEEL_TEST_NETNS"  # "0": run on loopback even where namespaces can be made
IP_S = 10.0  # one `ip` command, on 2 busy cores
KILL_S = 10.0  # processes left in a namespace at teardown: SIGKILL, then waited this long


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=IP_S, check=check)


def unavailable() -> str | None:
    """Why namespaces cannot be made here (None: they can): tried for real, and undone."""
    if os.environ.get(OFF_ENV) == "0":
        return f"{OFF_ENV}=0"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2 is not installed)"
    if os.geteuid() != 0:
        return "not root: `ip netns add` needs CAP_SYS_ADMIN"
    name = f"twprobe-{secrets.token_hex(4)}"
    try:
        made = ip("netns", "add", name, check=False)
        if made.returncode != 0:
            return f"`ip netns add` failed: {made.stderr.strip()}"
        veth = ip(
            "-n", name, "link", "add", "a0", "type", "veth", "peer", "name", "a1", check=False
        )
        if veth.returncode != 0:
            return f"`ip link add ... type veth` failed: {veth.stderr.strip()}"
        return None
    finally:
        ip("netns", "del", name, check=False)


def free_subnet() -> str:
    """A 10.x.y.0/24 prefix ("10.x.y") that no route here uses: parallel runs pick apart."""
    routes = ip("-4", "route", "show", "table", "all").stdout
    for _ in range(200):
        prefix = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
        if f"{prefix}." not in routes:
            return prefix
    raise RuntimeError("no free 10.x.y.0/24 subnet for the test's bridge")


@dataclass
class Machine:
    name: str  # the node's name too: n1, n2, ...
    netns: str
    host_veth: str  # the bridge's end, in the test's namespace
    address: str

    @property
    def prefix(self) -> list[str]:
        """The command prefix that runs a process on this machine."""
        return ["ip", "netns", "exec", self.netns]


@dataclass
class Machines:
    count: int = 3
    token: str = field(default_factory=lambda: secrets.token_hex(3))
    machines: list[Machine] = field(default_factory=list)
    bridge: str = ""
    cut: set[str] = field(default_factory=set)

    def __enter__(self) -> Machines:
        try:
            self.create()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def create(self) -> None:
        subnet = free_subnet()
        self.bridge = f"twb{self.token}"
        ip("link", "add", self.bridge, "type", "bridge")
        ip("addr", "add", f"{subnet}.254/24", "dev", self.bridge)
        ip("link", "set", self.bridge, "up")
        for index in range(1, self.count + 1):
            machine = Machine(
                f"n{index}", f"tw-{self.token}-m{index}", f"tw{self.token}h{index}",
                f"{subnet}.{index}",
            )  # fmt: skip
            ip("netns", "add", machine.netns)
            self.machines.append(machine)
            ip("link", "add", machine.host_veth, "type", "veth", "peer", "name", "eth0",
               "netns", machine.netns)  # fmt: skip
            ip("link", "set", machine.host_veth, "master", self.bridge, "up")
            ip("-n", machine.netns, "addr", "add", f"{machine.address}/24", "dev", "eth0")
            ip("-n", machine.netns, "link", "set", "eth0", "up")
            ip("-n", machine.netns, "link", "set", "lo", "up")

    def named(self, name: str) -> Machine:
        return next(machine for machine in self.machines if machine.name == name)

    def cut_off(self, name: str) -> None:
        """Pull the machine's cable: its eth0 down, inside its namespace."""
        machine = self.named(name)
        ip("-n", machine.netns, "link", "set", "eth0", "down")
        self.cut.add(name)

    def heal(self, name: str) -> None:
        machine = self.named(name)
        ip("-n", machine.netns, "link", "set", "eth0", "up")
        self.cut.discard(name)

    def pids(self, machine: Machine) -> list[int]:
        listed = ip("netns", "pids", machine.netns, check=False).stdout.split()
        return [int(pid) for pid in listed if pid.isdigit()]

    def close(self) -> None:
        """Kill and wait what still runs inside, then delete links, namespaces, bridge."""
        leftover = [pid for machine in self.machines for pid in self.pids(machine)]
        for pid in leftover:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + KILL_S
        for pid in leftover:
            while time.monotonic() < deadline and _alive(pid):
                time.sleep(0.05)
        for machine in self.machines:
            # the host end first: deleting a namespace frees its veths only later, async
            ip("link", "del", machine.host_veth, check=False)
            ip("netns", "del", machine.netns, check=False)
        if self.bridge:
            ip("link", "del", self.bridge, check=False)
        self.machines.clear()

    def leftovers(self) -> list[str]:
        """Namespaces or links of this run still present (empty after `close`)."""
        names = ip("netns", "list", check=False).stdout + ip("link", check=False).stdout
        return [line for line in names.splitlines() if self.token in line]


def _alive(pid: int) -> bool:
    """Running and not a zombie (a child of the test's own is reaped by its Popen)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False
