"""The GIL switch interval of a server process (`Settings.gil_switch_interval_ms`).

A thread that wants the GIL while another holds it waits until the holder gives it up
at a blocking call, or until the switch interval has passed and CPython makes it give
it up: 5 ms by default. The way from a due timer to its consumer crosses threads that
each wait for the GIL once or more: the writer after every RocksDB call (the calls
release it), the delivery thread the fire wakes, the Subscribe stream's thread that
builds the batch. Behind a SendBatch handler decoding a hundred messages in pure
Python, each of those waits can take the whole interval, and they add up in the tail.

A 1 ms interval shortens those waits: on the load test the delay error's P99 and P999
came out well below the default's, for the same server CPU. It pays only when the process
has CPU to spare: with the server at a full core, more switches cost more than the
shorter waits saved (docs/decisions/0006-gc-freeze-and-gil-switch-interval.md has the
figures).
"""

from __future__ import annotations

import sys

import structlog

log = structlog.get_logger("timerwheel.gil")


def set_switch_interval(interval_ms: int) -> float:
    """Set this process's switch interval; returns it as the interpreter reports it (ms)."""
    sys.setswitchinterval(interval_ms / 1000)
    now_ms = round(sys.getswitchinterval() * 1000, 3)
    log.info("gil_switch_interval_set", interval_ms=now_ms)
    return now_ms
