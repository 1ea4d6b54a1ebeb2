"""The processes a test's subprocess started, read with psutil while they may be exiting."""

from __future__ import annotations

import psutil


def descendants(pid: int) -> list[psutil.Process]:
    """Every process below `pid` now; none once `pid` is gone."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def command_line(process: psutil.Process) -> str:
    """Its command line; empty once it has exited."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


def sleep_on(event) -> None:
    """A spawned child's work in tests/procs/test_proc.py: sleep in `event.wait()`. Here, not
    in the test module, so that the child can import it (it gets the parent's sys.path)."""
    event.wait()
