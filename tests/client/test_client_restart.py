"""A server restarted under a sending client: the idempotent calls ride through it.

A thread sends with client-chosen ids and reads each back, in a loop, with no retry code
of its own; the server is stopped (SIGTERM, or SIGKILL) and started again on the same
port and data dir. Every call of the loop returns (the client retries them on
UNAVAILABLE, timerwheel/retries.py), some of them made while no server was there; every
send it acknowledged is stored after. A send with a server-made id in the outage is not
retried: a repeat could store it twice, so it raises UNAVAILABLE.
"""

from __future__ import annotations

import itertools
import signal
import threading
import time

import grpc
import pytest
from helpers.serve_process import ServeProcess
from helpers.waits import WAIT_S

from timerwheel.client import Client, RemoteError
from timerwheel.common import State

# system: real `timerwheel serve` processes, stopped and started again
pytestmark = pytest.mark.system

HOUR_MS = 3_600_000
RESTART_BUDGET_S = 30.0  # a `serve` started again on 2 loaded cores, with margin


class SendingLoop(threading.Thread):
    """Sends with client ids and reads each back, as plain calls: no retry code here."""

    def __init__(self, client: Client) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.stop = threading.Event()
        self.acknowledged: list[str] = []
        self.calls: list[tuple[float, float]] = []  # (started, returned), monotonic
        self.error: BaseException | None = None
        self._progress = threading.Condition()

    def run(self) -> None:
        try:
            for n in itertools.count():
                if self.stop.is_set():
                    return
                message_id = f"restart-{n}"
                started = time.monotonic()
                self.client.send("restart", b"x", delay_ms=HOUR_MS, message_id=message_id)
                assert self.client.get(message_id).state is State.SCHEDULED
                with self._progress:
                    self.calls.append((started, time.monotonic()))
                    self.acknowledged.append(message_id)
                    self._progress.notify_all()
                time.sleep(0.01)
        except BaseException as error:
            self.error = error
            with self._progress:
                self._progress.notify_all()

    def wait_count(self, count: int, timeout_s: float = 30) -> None:
        with self._progress:
            done = self._progress.wait_for(
                lambda: len(self.acknowledged) >= count or self.error is not None, timeout_s
            )
        assert self.error is None, f"the loop failed: {self.error!r}"
        assert done, f"{len(self.acknowledged)} sends acknowledged, not {count}"

    def finish(self) -> None:
        self.stop.set()
        self.join(WAIT_S)
        assert not self.is_alive()
        assert self.error is None, f"the loop failed: {self.error!r}"


@pytest.mark.parametrize("stop", ["sigterm", "sigkill"])
def test_idempotent_calls_succeed_through_a_restart(tmp_path, serve_process, stop):
    data = tmp_path / "data"
    first: ServeProcess = serve_process(data)
    # The budget covers a restart on a busy machine (the default's 3 s need not).
    with Client(first.target, timeout_s=60, restart_budget_s=RESTART_BUDGET_S) as client:
        loop = SendingLoop(client)
        loop.start()
        try:
            loop.wait_count(20)
            if stop == "sigterm":
                first.signal(signal.SIGTERM)
                assert first.wait_exit() == 0
            else:
                first.kill()
            down_at = time.monotonic()
            # In the outage: a send the server would name cannot be repeated safely.
            with pytest.raises(RemoteError) as refused:
                client.send("restart", b"no id", delay_ms=HOUR_MS)
            assert refused.value.code is grpc.StatusCode.UNAVAILABLE
            assert time.monotonic() - down_at < 5  # refused, not waited on
            # Give the loop's calls time to meet the outage before the server returns.
            time.sleep(2 * client.retry.initial_s)
            second = serve_process(data, "--port", str(first.port))
            up_at = time.monotonic()
            assert second.port == first.port
            count = len(loop.acknowledged)
            loop.wait_count(count + 20)
        finally:
            loop.finish()
        # Calls made while no server was there returned once it was back.
        assert any(started < up_at and returned > up_at for started, returned in loop.calls)
        assert down_at < up_at
    with second.client() as client:
        states = {client.get(m).state for m in loop.acknowledged}
        assert states == {State.SCHEDULED}
        assert client.count("restart").pending == len(loop.acknowledged)
