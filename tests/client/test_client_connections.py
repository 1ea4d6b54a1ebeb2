"""One client on several TCP connections (timerwheel.connections): `connections=K` opens
K connections and the calls take turns on them, for the sync and the asyncio client; a
bad count is refused naming the value; `wait_ready` spreads the connections evenly over a
`--workers` server's workers (checked against the workers' side of each TCP connection),
and leaves them alone where the server does not say which worker it is."""

from __future__ import annotations

import asyncio
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import grpc
import psutil
import pytest
from grpc_health.v1 import health, health_pb2_grpc
from helpers.waits import WAIT_S

import timerwheel
from timerwheel.common import State
from timerwheel.connections import (
    REDIALS_PER_CONNECTION,
    TakingTurns,
    place_in,
    redial_choice,
    redials,
)


def _connections_to(target: str) -> int:
    """This process's established TCP connections to the server's port (client side)."""
    port = int(target.rsplit(":", 1)[1])
    return sum(
        1
        for c in psutil.Process().net_connections("tcp")
        if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
    )


@pytest.mark.parametrize("connections", [1, 3])
def test_the_sends_of_one_client_take_turns_on_its_connections(server, connections):
    # A channel connects at its first call, and nothing here waits for readiness: a
    # connection is established only when a call went over it.
    with timerwheel.Client(server.target, timeout_s=WAIT_S, connections=connections) as client:
        sent = [client.send("orders", f"m{i}", delay_ms="1h") for i in range(connections)]
        assert _connections_to(server.target) == connections
        assert {client.get(s.message_id).state for s in sent} == {State.SCHEDULED}


def test_the_async_client_takes_turns_on_its_connections(server):
    async def main():
        client = timerwheel.AsyncClient(server.target, timeout_s=WAIT_S, connections=3)
        async with client:
            sent = [await client.send("orders", f"m{i}", delay_ms="1h") for i in range(3)]
            assert _connections_to(server.target) == 3
            assert len({s.message_id for s in sent}) == 3

    asyncio.run(asyncio.wait_for(main(), WAIT_S * 3))


def test_wait_ready_connects_every_connection(server):
    with timerwheel.Client(server.target, connections=2) as client:
        client.wait_ready(timeout_s=WAIT_S)
        assert _connections_to(server.target) == 2


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_a_connection_count_that_is_not_a_whole_number_of_at_least_one_is_refused(bad):
    with pytest.raises(ValueError, match=rf"connections={bad!r}: must be a whole number"):
        timerwheel.Client("127.0.0.1:1", connections=bad)
    with pytest.raises(ValueError, match=rf"connections={bad!r}: must be a whole number"):
        timerwheel.AsyncClient("127.0.0.1:1", connections=bad)


def test_each_method_looked_up_is_the_next_stubs_even_from_many_threads():
    stubs = tuple(SimpleNamespace(Send=name) for name in "abc")
    turns = TakingTurns(stubs)
    assert [turns.Send for _ in range(6)] == list("abcabc")
    chosen: Counter[str] = Counter()
    lock = threading.Lock()

    def look_up(times: int) -> None:
        mine = Counter(turns.Send for _ in range(times))
        with lock:
            chosen.update(mine)

    threads = [threading.Thread(target=look_up, args=(3_000,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=WAIT_S)
    assert chosen == {"a": 4_000, "b": 4_000, "c": 4_000}


# -- spreading the connections over a server's workers ---------------------------------------
@pytest.mark.parametrize(
    ("places", "expected"),
    [
        ([(0, 2), (1, 2)], None),
        ([(0, 2), (0, 2)], 1),  # the last connection on the crowded worker
        ([(1, 2), (1, 2), (0, 2)], None),  # 2 and 1: as even as three can be
        ([(1, 2), (1, 2), (1, 2)], 2),
        ([(0, 2), (0, 2), (0, 2), (1, 2)], 2),
        ([(0, 3), (0, 3)], 1),  # workers 1 and 2 have none
        ([(0, 3), (1, 3)], None),
        ([(0, 1), (0, 1), (0, 1)], None),  # one worker: nowhere else to go
        ([(0, 2), None], None),  # a connection whose worker is not known
        ([(0, 2), (0, 3)], None),  # the answers disagree on the count (a restart between)
        ([], None),
    ],
)
def test_the_connection_to_dial_again_is_one_on_a_worker_two_ahead_of_another(places, expected):
    assert redial_choice(places) == expected


def test_redials_follow_the_places_the_caller_learns_and_stop_at_their_bound():
    places = [(0, 2), (0, 2), (0, 2), (0, 2)]
    order = []
    for index in redials(places):
        order.append(index)
        places[index] = (1, 2) if len(order) in (2, 3) else (0, 2)  # draws: lose, win, win
    assert order == [3, 3, 2] and places.count((1, 2)) == 2
    stuck = [(0, 2), (0, 2)]  # every redial lands on the crowded worker again
    assert list(redials(stuck)) == [1] * (REDIALS_PER_CONNECTION * 2)


@pytest.mark.parametrize(
    ("metadata", "place"),
    [
        ((("timerwheel-worker", "1/2"),), (1, 2)),
        ((("other", "x"), ("timerwheel-worker", "0/1")), (0, 1)),
        ((("timerwheel-worker", "2/2"),), None),
        ((("timerwheel-worker", "a/b"),), None),
        ((("other", "1/2"),), None),
        (None, None),
    ],
)
def test_a_worker_place_is_read_from_the_health_answers_metadata(metadata, place):
    assert place_in(metadata) == place


def _held_by_worker(server, target: str, expected: int) -> Counter[int]:
    """How many of this process's connections to `target` each worker process holds, as
    the kernel sees them (the workers' side of each TCP connection), once `expected` are
    established (a connection dialled again closes its old one asynchronously)."""
    port = int(target.rsplit(":", 1)[1])

    def mine() -> set[int]:
        return {
            c.laddr.port
            for c in psutil.Process().net_connections("tcp")
            if c.raddr and c.raddr.port == port and c.status == psutil.CONN_ESTABLISHED
        }

    deadline = time.monotonic() + WAIT_S
    while len(ports := mine()) != expected and time.monotonic() < deadline:
        time.sleep(0.01)  # polling the kernel's table until the old connections are gone
    assert len(ports) == expected
    held: Counter[int] = Counter()
    for index in range(2):
        worker = psutil.Process(server.children[f"worker-{index}"])
        for c in worker.net_connections("tcp"):
            if c.raddr and c.raddr.port in ports and c.status == psutil.CONN_ESTABLISHED:
                held[index] += 1
    return held


@pytest.mark.system  # a `serve --workers 2` process tree
def test_wait_ready_spreads_a_clients_connections_evenly_over_the_workers(tmp_path, serve_process):
    server = serve_process(tmp_path / "data", "--workers", "2")
    for connections, even in ((2, [1, 1]), (3, [1, 2]), (4, [2, 2])):
        with timerwheel.Client(server.target, timeout_s=WAIT_S, connections=connections) as client:
            client.wait_ready(timeout_s=WAIT_S)
            held = _held_by_worker(server, server.target, connections)
            assert sorted(held.values()) == even
            assert Counter(index for index, _ in client.connection_workers) == held
            assert {count for _, count in client.connection_workers} == {2}
            sent = [client.send("spread", f"m{i}", delay_ms="1h") for i in range(connections)]
            assert {client.get(s.message_id).state for s in sent} == {State.SCHEDULED}

    async def spread_async() -> Counter[int]:
        async with timerwheel.AsyncClient(server.target, timeout_s=WAIT_S, connections=2) as client:
            await client.wait_ready(timeout_s=WAIT_S)
            held = await asyncio.to_thread(_held_by_worker, server, server.target, 2)
            assert Counter(index for index, _ in client.connection_workers) == held
            assert (await client.send("spread", "async", delay_ms="1h")).message_id
            return held

    assert sorted(asyncio.run(spread_async()).values()) == [1, 1]


def test_a_one_process_server_answers_as_worker_0_of_1_and_nothing_is_dialled_again(server):
    with timerwheel.Client(server.target, timeout_s=WAIT_S, connections=3) as client:
        client.wait_ready(timeout_s=WAIT_S)
        assert client.connection_workers == [(0, 1)] * 3
        assert _connections_to(server.target) == 3


def test_a_server_that_does_not_say_its_worker_leaves_the_connections_as_they_are():
    bare = grpc.server(ThreadPoolExecutor(max_workers=2))  # plain health: no worker place
    health_pb2_grpc.add_HealthServicer_to_server(health.HealthServicer(), bare)
    port = bare.add_insecure_port("127.0.0.1:0")
    bare.start()
    try:
        target = f"127.0.0.1:{port}"
        with timerwheel.Client(target, timeout_s=WAIT_S, connections=2) as client:
            client.wait_ready(timeout_s=WAIT_S)
            assert client.connection_workers == [None, None]
            assert _connections_to(target) == 2
    finally:
        bare.stop(grace=None)
