"""A SIGSTOPped server shows no clock step (docs/engine.md, "Clock steps"): the wall clock
and CLOCK_MONOTONIC both run on while the process is stopped, so the step detection
(timerwheel.wheels.clock_step), which compares their advances, sees none. A timer that
fell due during the stop fires once the process runs again."""

from __future__ import annotations

import signal
import time

import pytest
from helpers.serve_process import ServeProcess
from helpers.waits import WAIT_S

pytestmark = pytest.mark.system  # a real `timerwheel serve`, stopped and continued

STOP_S = 3.0  # three times the default clock_step_threshold_ms (1 s)


def test_a_sigstop_longer_than_the_threshold_counts_no_clock_step(tmp_path):
    server = ServeProcess(tmp_path / "data")
    try:
        with server.client() as client:
            sent = client.send("stopped", b"due during the stop", delay_ms=1_000)
            stopped_at = time.monotonic()
            server.signal(signal.SIGSTOP)
            try:
                time.sleep(STOP_S)  # the stop itself is what is tested, not a wait
            finally:
                server.signal(signal.SIGCONT)
            stopped_s = time.monotonic() - stopped_at
            deadline = time.monotonic() + WAIT_S
            while client.get(sent.message_id).state.name != "FIRED":
                assert time.monotonic() < deadline, "the timer due during the stop never fired"
                time.sleep(0.05)
            stats = client.stats()
        assert stopped_s >= STOP_S
        assert stats.clock_steps_forward == 0 and stats.clock_steps_backward == 0, stats
        assert not [e for e in server.events if e.get("event") == "clock_step"]
        print(f"\nstopped {stopped_s:.2f} s: no clock step; the timer due meanwhile fired")
        server.signal(signal.SIGTERM)
        assert server.wait_exit() == 0
    finally:
        server.kill()
