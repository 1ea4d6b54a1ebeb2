"""Keeping a server process's start-up objects out of the cyclic garbage collector's scans.

CPython frees most objects by reference counting; its cyclic collector only looks for
reference cycles. A *full* collection (generation 2) walks every container object the
process tracks, with the GIL held, so while it runs nothing else in the process does:
no firing, no delivery, no request. After start-up a server process tracks about 55,000
such objects that live as long as it does (the functions, classes and modules of grpc,
protobuf, rocksdict, structlog and our own code), and walking them is most of the work
of each full collection.

Measured on the tdmq load test (14,000 sends/s, 30 s; gc callbacks timing each
collection in the one-process server): full collections came every 2-3 s and took
18-61 ms each (24-40 ms of CPU), 660 ms in all. After `gc.freeze()` at the end of
start-up they took at most 14 ms, 63 ms in all (docs/benchmarks.md, the section
"2026-11-24, 11:25-12:55").

`gc.freeze()` moves every tracked object to a permanent generation that collections
skip. Objects made later are collected as before, and frozen objects are still freed by
reference counting; only a cycle among frozen objects would never be collected, which
is why start-up's own garbage is collected first.
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger("timerwheel.heap")


def freeze_startup_heap() -> int:
    """Collect start-up's garbage, then freeze what is left; returns how many objects
    the collector will skip from now on. Call once, when the process is serving."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("startup_heap_frozen", objects=frozen)
    return frozen
