"""`timerwheel serve --workers N` as real processes: what runs, how it stops, and what a
SIGKILL of each kind of process does (timerwheel.procs.supervisor).

What must hold: --workers 2 runs an engine, a delivery and two worker processes; SIGTERM
stops every one of them and exits 0; a SIGKILLed supervisor takes its children with it; a
SIGKILLed worker, delivery or engine process is started again, and every send the server
acknowledged is still there and is delivered.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from helpers.ports import close_after_the_server, idle_connection, wait_until_plain_bind_refused
from helpers.streams import Collector, Producer
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.common import State
from timerwheel.procs.supervisor import check_port

# system: `serve --workers` process trees, SIGKILLed
pytestmark = [pytest.mark.system, pytest.mark.timeout(180)]


def _send(client: TimerClient, topic: str, count: int, delay_ms: int) -> list[str]:
    requests = [TimerClient.request(topic, f"m{i}", delay_ms=delay_ms) for i in range(count)]
    return [r.message_id for r in client.send_batch(requests)]


def test_workers_2_runs_every_process_and_sigterm_stops_them_all(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "2")
    assert sorted(server.children) == ["delivery", "engine", "worker-0", "worker-1"]
    supervisor = psutil.Process(server.proc.pid)
    descendants = {p.pid for p in supervisor.children(recursive=True)}
    assert set(server.children.values()) <= descendants
    assert len(set(server.children.values())) == 4  # four distinct processes
    with server.client() as client:
        sent = _send(client, "procs", 10, delay_ms=0)
        collector = Collector(client, "procs")
        try:
            collector.wait_count(10)
        finally:
            collector.stop()
        assert sorted(collector.ids()) == sorted(sent)

    server.signal(signal.SIGTERM)
    assert server.wait_exit(timeout_s=60) == 0
    assert server.wait_children_gone(timeout_s=0.5) == []  # none had to be killed
    names = [event["event"] for event in server.events]
    assert names.count("worker_ready") == 2
    assert (
        names.count("startup_heap_frozen") == 4
    )  # each child, once it serves (timerwheel.procs.heap)
    intervals = [e["interval_ms"] for e in server.events if e["event"] == "gil_switch_interval_set"]
    assert intervals == [1.0] * 4  # timerwheel.procs.gil, read back from each child's interpreter
    assert names[-1] == "server_stopped"
    assert "engine_closed" in names


@pytest.mark.parametrize("flags", [(), ("--workers", "2")], ids=["one-process", "workers-2"])
def test_a_burst_of_sigterms_stops_the_server_cleanly(tmp_path, serve_process, flags):
    # The handler once set a threading.Event, and a second SIGTERM arriving inside the
    # first's set() waited for itself forever (timerwheel.procs.lifecycle.SignalStop): about one
    # stop in twenty when a load run's harness was killed and two signals came together.
    server = serve_process(tmp_path / "data", *flags)
    with server.client() as client:
        assert client.send("burst", b"x", delay_ms=60_000).message_id
    for _ in range(300):
        server.signal(signal.SIGTERM)  # nothing once the process has been reaped
    assert server.wait_exit(timeout_s=60) == 0
    assert server.wait_children_gone(timeout_s=0.5) == []
    names = [event["event"] for event in server.events]
    assert names.count("signal_received") == 1
    assert names[-1] == "server_stopped"


def test_by_default_the_server_is_one_process(tmp_path, serve_process):
    server = serve_process(tmp_path / "data")
    assert server.children == {}
    assert psutil.Process(server.proc.pid).children(recursive=True) == []
    with server.client() as client:
        assert client.send("one", b"x", delay_ms=60_000).message_id
    server.signal(signal.SIGTERM)
    assert server.wait_exit(timeout_s=60) == 0
    assert [event["event"] for event in server.events].count("startup_heap_frozen") == 1


def test_the_gil_switch_interval_setting_reaches_the_serving_process(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--set", "gil_switch_interval_ms=3ms")
    with server.client() as client:
        assert client.send("one", b"x", delay_ms=60_000).message_id
    server.signal(signal.SIGTERM)
    assert server.wait_exit(timeout_s=60) == 0
    set_events = [e for e in server.events if e["event"] == "gil_switch_interval_set"]
    assert [e["interval_ms"] for e in set_events] == [3.0]  # read back from the interpreter


def test_sigkill_of_the_supervisor_leaves_no_orphans(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "2", "--metrics-port", "0")
    children = [psutil.Process(pid) for pid in server.children.values()]
    [runtime_dir] = os.listdir(server.tmp_dir)  # sockets, the children's metrics files
    server.proc.kill()
    server.proc.wait(timeout=WAIT_S)
    _, alive = psutil.wait_procs(children, timeout=WAIT_S)
    assert alive == []  # each child died with its parent (PR_SET_PDEATHSIG)
    assert os.listdir(server.tmp_dir) == [runtime_dir]  # a SIGKILL cannot clean up

    again = serve_process(tmp_path / "data", "--workers", "1", tmp_dir=server.tmp_dir)
    [removed] = again.wait_event("runtime_dirs_removed")["paths"]
    assert removed == os.path.join(server.tmp_dir, runtime_dir)
    [own] = os.listdir(server.tmp_dir)  # only the running supervisor's
    assert own != runtime_dir
    again.signal(signal.SIGTERM)
    assert again.wait_exit(timeout_s=60) == 0
    assert os.listdir(server.tmp_dir) == []


@pytest.mark.parametrize("victim", ["worker-0", "engine", "delivery"])
def test_sigkill_of_a_child_restarts_it_and_loses_no_acknowledged_send(
    tmp_path, serve_process, victim
):
    server = serve_process(tmp_path / "data", "--workers", "2")
    client = server.client()
    later = _send(client, "kill", 50, delay_ms=3_000)
    now = _send(client, "kill", 20, delay_ms=0)
    holder = Collector(client, "kill", auto_ack=False)  # fired, delivered, never acked
    holder.wait_count(20)
    producer = Producer(server.target, "kill", delay_ms=500)  # sending through the kill
    producer.wait_batches(5)
    old_pid = server.children[victim]

    psutil.Process(old_pid).kill()
    restarted = server.wait_event("child_restarted", timeout_s=60)
    assert restarted["child"] == victim
    assert restarted["pid"] != old_pid
    producer.join()
    holder.stop()
    client.close()

    # The service answers again (a worker restarted, or calls reconnected to the new
    # engine or delivery process), and everything acknowledged arrives.
    with server.client() as client:
        extra = _send(client, "kill", 5, delay_ms=0)  # the restarted child is ready
        consumer = Collector(client, "kill")
        try:
            expected = set(later) | set(now) | set(extra) | set(producer.acknowledged)
            assert consumer.wait_for(lambda c: expected <= set(c.ids()), timeout_s=30), (
                f"missing after SIGKILL of {victim}: {sorted(expected - set(consumer.ids()))[:5]}"
            )
        finally:
            consumer.stop()
        assert {client.get(m).state for m in later} == {State.ACKED}


def _port_in_time_wait() -> int:
    """A loopback port whose only socket is a closed connection waiting out TIME_WAIT."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = idle_connection(port)
        accepted, _ = listener.accept()
        accepted.close()  # the server's side closes first
        close_after_the_server(client)
    wait_until_plain_bind_refused(port, WAIT_S)
    return port


def test_a_port_left_in_time_wait_by_the_last_server_is_free_to_serve_on():
    port = _port_in_time_wait()  # a plain bind is refused there now
    assert check_port("127.0.0.1", port) == port


def test_a_busy_port_is_a_one_line_error(tmp_path, serve_process):
    first = serve_process(tmp_path / "a", "--workers", "1")
    args = [
        str(Path(sys.executable).parent / "timerwheel"), "serve", "--data-dir",
        str(tmp_path / "b"), "--port", str(first.port), "--log-format", "json",
    ]  # fmt: skip
    done = subprocess.run(args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{first.port}" in done.stdout

    tmp_dir = tmp_path / "tmp"  # a refused supervisor leaves no runtime dir behind
    tmp_dir.mkdir()
    env = {**os.environ, "TMPDIR": str(tmp_dir)}
    done = subprocess.run([*args, "--workers", "2"], capture_output=True, text=True,
                          timeout=60, env=env)  # fmt: skip
    assert done.returncode == 1
    assert f"cannot listen on 127.0.0.1:{first.port}" in done.stdout
    assert os.listdir(tmp_dir) == []
