"""A load run's worker processes (engine.proc.run_as_child_of) and the multiprocessing
Events they sleep on: a signal must never leave an Event that the parent cannot set.

The server's children (`become_child`) are tested end to end in tests/test_supervisor.py."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import threading
import time

import pytest

from engine.proc import run_as_child_of

pytestmark = pytest.mark.timeout(120)

BOUND_S = 60  # an end, not a speed


def _sleep_on(event) -> None:
    event.wait()


def _asleep_on(event, child) -> None:
    """Returns once `child` sleeps in `event.wait()`: the Event's Condition counts it
    (CPython's multiprocessing Condition counts sleepers in a semaphore before it sleeps)."""
    deadline = time.monotonic() + BOUND_S
    while event._cond._sleeping_count.get_value() < 1:
        assert child.is_alive() and time.monotonic() < deadline, child.exitcode
        time.sleep(0.01)


def _set_within_bound(event) -> bool:
    """event.set() in a thread: False if it is still blocked after the bound (it would
    be forever; the daemon thread is left behind with the Event, which nothing else uses)."""
    setter = threading.Thread(target=event.set, daemon=True)
    setter.start()
    setter.join(BOUND_S)
    return not setter.is_alive()


@pytest.fixture
def sleeping_child():
    ctx = mp.get_context("spawn")
    event = ctx.Event()
    child = ctx.Process(target=run_as_child_of, args=(os.getpid(), _sleep_on, event))
    child.start()
    try:
        _asleep_on(event, child)
        yield event, child
    finally:
        if child.is_alive():
            child.kill()
        child.join(BOUND_S)


def test_sigterm_unwinds_a_sleeping_worker_and_the_parent_can_still_set_the_event(
    sleeping_child,
):
    event, child = sleeping_child
    os.kill(child.pid, signal.SIGTERM)
    child.join(BOUND_S)
    assert child.exitcode == 128 + signal.SIGTERM  # SystemExit, not death by the signal
    assert _set_within_bound(event), "Event.set() waits for a sleeper that died"


def test_ctrl_c_is_left_to_the_parent(sleeping_child):
    event, child = sleeping_child
    os.kill(child.pid, signal.SIGINT)  # the terminal sends it to the whole process group
    assert _set_within_bound(event)
    child.join(BOUND_S)
    assert child.exitcode == 0  # woken by the Event, not by KeyboardInterrupt
