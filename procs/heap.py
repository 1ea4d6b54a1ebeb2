"""Keeping a server process's start-up objects out of the cyclic garbage collector's scans.

CPython frees most objects by reference counting; its cyclic collector only looks for
reference cycles. A *full* collection (generation 2) walks every container object the
process tracks, with the GIL held, so while it runs nothing else in the process does:
no firing, no delivery, no request. After start-up a server process tracks about 55,000
such objects that live as long as it does (the functions, classes and modules of grpc,
protobuf, rocksdict, structlog and our own code), and walking them is most of the work
of each full collection.

Under steady load full collections come every few seconds, and each one stops the
process, firing and delivery included, for tens of milliseconds. With those objects
frozen at the end of start-up (`gc.freeze()`), a full collection walks only what was made
since, and the time spent in them drops about tenfold
(docs/decisions/0006-gc-freeze-and-gil-switch-interval.md has the figures).

`gc.freeze()` moves every tracked object to a permanent generation that collections
skip. Objects made later are collected as before, and frozen objects are still freed by
reference counting; only a cycle among frozen objects would never be collected, which
is why start-up's own garbage is collected first.

Young collections are made rare too. CPython starts one whenever the container objects
allocated since the last exceed those freed by 700 (generation 0's default threshold),
so a process that makes and drops tens of thousands of tuples, lists and records a
second (a SendBatch's specs, a fire chunk, a delivery batch) collected a few hundred
times a second, each collection walking whatever was young and alive at that instant,
every tenth also generation 1: at a high send rate with `--workers 2` the server's
processes spent a few percent of their CPU in the collector. Those objects are freed by
reference counting anyway; only cycles need the collector, and the server makes few.
With the threshold at `YOUNG_THRESHOLD` a steady load hardly reaches it, garbage cycles
still start a collection once that many objects pile up (so their memory stays bounded),
and a young collection walks at most about that many objects. The collector's share of
the CPU then falls to a small fraction of what it was, in steady load and in a burst,
and its longest pauses are shorter too (docs/decisions/0006, as above).
"""

from __future__ import annotations

import gc

import structlog

log = structlog.get_logger("timerwheel.heap")

# Generation 0's collection threshold while serving (CPython's default: 700).
YOUNG_THRESHOLD = 20_000


def prepare_heap_for_serving() -> int:
    """Collect start-up's garbage, freeze what is left, and make young collections rare;
    returns how many objects the collector will skip from now on. Call once, when the
    process is serving."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    frozen = gc.get_freeze_count()
    log.info("startup_heap_frozen", objects=frozen, young_threshold=YOUNG_THRESHOLD)
    return frozen
