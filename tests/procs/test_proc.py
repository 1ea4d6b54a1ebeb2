"""A load run's worker processes (timerwheel.procs.lifecycle.run_as_child_of) and the
multiprocessing Events they sleep on: a signal must never leave an Event that the parent cannot set.
The stop flag a signal sets (timerwheel.procs.lifecycle.SignalStop): its handler can never wait for
the thread it interrupted.

The server's children (`become_child`) are tested end to end in tests/procs/test_supervisor.py."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import sys
import threading
import time

import pytest
from helpers.processes import sleep_on

from timerwheel.procs.lifecycle import SignalStop, run_as_child_of

pytestmark = pytest.mark.timeout(120)

BOUND_S = 60  # an end, not a speed


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
    child = ctx.Process(target=run_as_child_of, args=(os.getpid(), sleep_on, event))
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


def _set_with_a_signal_at_every_line(stop) -> list[int]:
    """`stop.set()`, with a handler's `stop.set()` run inside it at each of its lines, as
    a signal's handler runs between two bytecodes of whatever the main thread does (the
    trace function's own call is not traced). Returns the lines it ran at."""
    set_code = type(stop).set.__code__
    lines = []

    def at_each_line(frame, event, _arg):
        if event == "line":
            lines.append(frame.f_lineno)
            stop.set()
        return at_each_line

    sys.settrace(lambda frame, _event, _arg: at_each_line if frame.f_code is set_code else None)
    try:
        stop.set()
    finally:
        sys.settrace(None)
    return lines


def test_a_signal_stop_set_by_a_handler_inside_its_own_set_does_not_wait_for_itself():
    # A threading.Event, set so, waits forever for the lock its interrupted set holds
    # (checked by hand: that is how `timerwheel serve` hung on two SIGTERMs in a row).
    stop = SignalStop()
    lines: list[int] = []
    setter = threading.Thread(
        target=lambda: lines.extend(_set_with_a_signal_at_every_line(stop)), daemon=True
    )
    setter.start()
    setter.join(BOUND_S)
    assert not setter.is_alive(), "set() waits for the set() it interrupted"
    assert lines and stop.is_set()
    stop.close()


def test_a_signal_stop_wakes_every_waiting_thread_and_stays_set():
    with SignalStop() as stop:
        assert stop.wait(0.01) is False and not stop.is_set()
        woken: list[bool] = []
        waiters = [threading.Thread(target=lambda: woken.append(stop.wait())) for _ in range(3)]
        for waiter in waiters:
            waiter.start()
        for _ in range(100_000):  # more bytes than the pipe holds: still one flag
            stop.set()
        for waiter in waiters:
            waiter.join(BOUND_S)
        assert woken == [True, True, True]
        assert stop.wait() is True and stop.wait(0) is True
