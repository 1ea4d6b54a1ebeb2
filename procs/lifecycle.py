"""Plumbing shared by the child processes of `timerwheel serve --workers N`.

Each child dies with the supervisor (Linux `PR_SET_PDEATHSIG`, so a SIGKILLed supervisor
leaves no orphans), ignores Ctrl-C (the terminal sends SIGINT to the whole process group;
only the supervisor decides the order of shutdown) and stops on SIGTERM, which the
supervisor sends in order: workers, delivery, engine last. A load run's workers (the
harness's producers and consumers, `run_as_child_of`) die with their parent too, leave
Ctrl-C to it and unwind on SIGTERM. A signal that asks a process to stop sets a
`SignalStop`, never a `threading.Event` (see there).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import select
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _find_prctl() -> Callable[[int, int], int] | None:
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the parent's checks remain
        return ctypes.CDLL(None, use_errno=True).prctl
    return None


# Looked up once here, so that as a `preexec_fn` (between fork and exec, where another
# thread may have held a lock at the fork) `die_with_parent` does nothing but the call.
_PRCTL = _find_prctl()


def die_with_parent(signum: int = signal.SIGKILL) -> None:
    """Have the kernel send this process `signum` when its parent dies (Linux
    `PR_SET_PDEATHSIG`); elsewhere nothing."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, signum)


def run_as_child_of(parent_pid: int, target: Callable, *args) -> None:
    """A load run's worker process's entry (multiprocessing's `target`): die with
    `parent_pid`, leave Ctrl-C to the parent (which stops its workers in order), unwind on
    SIGTERM, then run `target(*args)`; return at once if the parent died before prctl
    took effect."""
    die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _unwind)
    if os.getppid() == parent_pid:
        target(*args)


def _unwind(signum: int, _frame: object) -> None:
    # SIGTERM's default action ends a process wherever it is, also asleep on one of the
    # run's multiprocessing Events; that Event's Condition then counts a sleeper that never
    # wakes, and the parent's next `set()` waits for its wake-up forever (a SIGTERM to the
    # whole process group, as `timeout` sends, hung `timerwheel loadtest`). Raised as an
    # exception in the wait, the wait's own `finally` counts the wake-up.
    raise SystemExit(128 + signum)


class SignalStop:
    """A stop flag that a signal handler may set: `set` takes no lock; `wait` wakes
    every thread that waits, at once.

    A `threading.Event` cannot be set from a handler. Python runs a handler in the main
    thread between two bytecodes, so it may run while that same thread holds the Event's
    lock: inside its own `Event.wait`, or inside the `set` of a first signal when a
    second one arrives. `Event.set` then waits for that lock, which is held by the frame
    it interrupted, forever (a `timerwheel serve` given SIGTERM twice in a row hung so,
    in about one run of twenty). Here `set` is a flag and a byte written to a pipe, and
    `wait` is a `select` on the pipe, which stays readable once set (the byte is never
    read)."""

    def __init__(self) -> None:
        self._read_fd, self._write_fd = os.pipe()  # neither is inherited by a child
        os.set_blocking(self._write_fd, False)
        self._set = False

    def set(self) -> None:
        self._set = True
        with contextlib.suppress(OSError):  # full (set many times) or closed: it is set
            os.write(self._write_fd, b"!")

    def is_set(self) -> bool:
        return self._set

    def wait(self, timeout: float | None = None) -> bool:
        """Until set or `timeout` seconds have passed; whether it is set."""
        if not self._set:
            select.select([self._read_fd], [], [], timeout)
        return self._set

    def close(self) -> None:
        """Once no thread waits and no handler can set it any more."""
        os.close(self._read_fd)
        os.close(self._write_fd)

    def __enter__(self) -> SignalStop:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def become_child(parent_pid: int) -> SignalStop:
    """Set up this process as a child of `parent_pid`; returns the stop SIGTERM sets."""
    die_with_parent()
    if os.getppid() != parent_pid:  # the parent died before prctl took effect
        sys.exit(1)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    stop = SignalStop()  # lives as long as the process
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    return stop


def wait_for_stop(
    stop: SignalStop, parent_pid: int, alive: Callable[[], bool] = lambda: True
) -> bool:
    """Block until SIGTERM (True), or until the parent is gone or `alive()` turns False
    (False: the caller exits non-zero so the supervisor restarts it)."""
    while not stop.wait(0.5):
        if os.getppid() != parent_pid or not alive():
            return False
    return True
