"""The fault suite's machines (helpers.netns): namespaces that reach each other and the
test over the bridge, a cut that isolates one, a heal that restores it, and a teardown
that leaves nothing behind."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest
from helpers.netns import Machines, unavailable

pytestmark = pytest.mark.system

# A one-shot TCP echo server on the machine's address, port 0: it prints its port, answers
# one connection, exits.
ECHO = """
import socket, sys
server = socket.create_server((sys.argv[1], 0))
print(server.getsockname()[1], flush=True)
server.settimeout(20)
connection, _ = server.accept()
connection.sendall(connection.recv(16))
"""

# A client on another machine: "ok" if it got its bytes back within the timeout.
CONNECT = """
import socket, sys
try:
    with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2) as c:
        c.sendall(b"ping")
        print("ok" if c.recv(16) == b"ping" else "wrong")
except OSError as error:
    print(type(error).__name__)
"""


@pytest.fixture
def machines():
    reason = unavailable()
    if reason is not None:
        pytest.skip(f"network namespaces cannot be made here: {reason}")
    with Machines() as made:
        yield made
    assert made.leftovers() == []


def echo_on(machines: Machines, name: str) -> tuple[subprocess.Popen, int]:
    machine = machines.named(name)
    server = subprocess.Popen(
        [*machine.prefix, sys.executable, "-c", ECHO, machine.address],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert server.stdout is not None
    return server, int(server.stdout.readline())


def connect_from(machines: Machines, name: str, address: str, port: int) -> str:
    done = subprocess.run(
        [*machines.named(name).prefix, sys.executable, "-c", CONNECT, address, str(port)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def test_machines_reach_each_other_until_cut_and_again_once_healed(machines):
    n1 = machines.named("n1")
    server, port = echo_on(machines, "n1")
    try:
        assert connect_from(machines, "n2", n1.address, port) == "ok"
        assert server.wait(timeout=20) == 0
    finally:
        server.kill()
        server.wait()

    server, port = echo_on(machines, "n1")
    try:
        machines.cut_off("n1")
        assert connect_from(machines, "n2", n1.address, port) != "ok"
        machines.heal("n1")
        assert connect_from(machines, "n3", n1.address, port) == "ok"
    finally:
        server.kill()
        server.wait()


def test_the_test_reaches_a_machine_over_the_bridge(machines):
    n2 = machines.named("n2")
    server, port = echo_on(machines, "n2")
    try:
        with socket.create_connection((n2.address, port), timeout=5) as connection:
            connection.sendall(b"hi")
            assert connection.recv(16) == b"hi"
    finally:
        server.kill()
        server.wait()


def test_teardown_kills_what_runs_inside_and_deletes_everything():
    if unavailable() is not None:
        pytest.skip(f"network namespaces cannot be made here: {unavailable()}")
    made = Machines()
    with made:
        machine = made.named("n3")
        sleeper = subprocess.Popen([*machine.prefix, "sleep", "600"])
    try:
        assert sleeper.wait(timeout=10) == -9  # killed by the teardown, not left running
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
            sleeper.wait()
    assert made.leftovers() == []
