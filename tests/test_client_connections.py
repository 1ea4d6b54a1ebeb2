"""One client on several TCP connections (timerwheel.connections): `connections=K` opens
K connections and the calls take turns on them, for the sync and the asyncio client; a
bad count is refused naming the value."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from types import SimpleNamespace

import psutil
import pytest
from conftest import WAIT_S

import timerwheel
from timerwheel.connections import TakingTurns
from wheels.domain import State


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
