"""timerwheel.procs.heap: start-up objects leave the full collection's scan; young collections are
rare; new cycles are still collected, without being asked. Run in a child interpreter:
freezing pytest's own heap would outlive the test."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from timerwheel.procs.heap import YOUNG_THRESHOLD

ROOT = Path(__file__).resolve().parents[2]

PROBE = textwrap.dedent(
    """
    import gc, json, weakref
    import timerwheel.server.app  # what a server process imports: grpc, protobuf, rocksdict, ...
    from timerwheel.procs.heap import YOUNG_THRESHOLD, prepare_heap_for_serving

    tracked_before = len(gc.get_objects())
    frozen = prepare_heap_for_serving()
    tracked_after = len(gc.get_objects())

    class Node:
        pass

    first, second = Node(), Node()
    first.other, second.other = second, first  # a cycle made after the freeze
    cycle = weakref.ref(first)
    del first, second

    collections = []
    gc.callbacks.append(lambda phase, info: phase == "stop" and collections.append(info))
    for _ in range(20):  # batches made and dropped, as a busy server does: no collection
        batch = [(n, str(n)) for n in range(5_000)]
        del batch
    churn_collections = len(collections)

    for _ in range(YOUNG_THRESHOLD):  # garbage cycles pile up: a collection starts alone
        a, b = Node(), Node()
        a.other, b.other = b, a
    del a, b
    print(json.dumps({
        "tracked_before": tracked_before, "frozen": frozen,
        "tracked_after": tracked_after, "threshold": gc.get_threshold()[0],
        "churn_collections": churn_collections, "collections": len(collections),
        "cycle_collected": cycle() is None,
    }))
    """
)


@pytest.mark.system  # a spawned Python that imports the whole server
def test_startup_objects_frozen_young_collections_rare_cycles_still_collected():
    done = subprocess.run(
        [sys.executable, "-c", PROBE], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # Tens of thousands of start-up objects (modules, classes, functions) move out of
    # the collector's generations: a full collection no longer walks them.
    assert result["tracked_before"] > 10_000
    assert result["frozen"] >= 0.9 * result["tracked_before"]
    assert result["tracked_after"] < 0.01 * result["tracked_before"]
    # Young collections are rare: made-and-dropped batches start none (with CPython's
    # default threshold of 700 these 20 batches of 5,000 start about 80) ...
    assert result["threshold"] == YOUNG_THRESHOLD
    assert result["churn_collections"] == 0
    # ... and the collector still runs by itself once garbage cycles pile up.
    assert result["collections"] >= 1
    assert result["cycle_collected"] is True
