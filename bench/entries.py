"""RocksDB entries a message writes and reads in the engine's burst, per column family.

    python -m bench.entries --timers 10000
    python -m bench.entries --steps --timers 10000


Runs `bench.engine_virtual.burst` natively (not under valgrind) and tallies, for the
part `bench.instructions burst` counts (between its `collect(True)` and `collect(False)`:
fires, fetches and acks) and for the fill before it (sends and cascades), every entry
the group commits hand to RocksDB (puts and deletes, from each `StagedBatch`, per column
family) and every entry the engine reads (wheel scans, record reads, `ready` reads, and
the fired records served from memory instead). Prints one JSON line, each figure a
message (a timer of the burst). With `--steps`, the same for each step of
`bench.step_costs` instead (send, cascade, fire, fetch, ack, sweep one at a time).
docs/performance.md's table of a message's life takes
its entry counts from here: a count, unlike a time, is the same on any machine.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from collections import Counter

from bench import engine_virtual, step_costs
from timerwheel.engine.fired_cache import FiredCache
from timerwheel.store import range_reads
from timerwheel.store import timer_store as timer_store_module
from timerwheel.store.batch import StagedBatch
from timerwheel.store.timer_reads import TimerReads

PARTS = ("fill", "measured")


class Tally:
    """Entries by part (fill: sends and cascades; measured: fires, fetches, acks)."""

    def __init__(self) -> None:
        self.part = "fill"
        self.counts: dict[str, Counter] = {part: Counter() for part in PARTS}

    def add(self, what: str, count: int) -> None:
        self.counts.setdefault(self.part, Counter())[what] += count


def instrument(tally: Tally) -> None:
    """Wrap the engine's few points where entries reach or leave RocksDB."""
    to_write_batch = StagedBatch.to_write_batch

    def counted_write_batch(self, handles):
        for family, staged in self.writes.items():
            deletes = sum(value is None for value in staged.values())
            tally.add(f"write {family} put", len(staged) - deletes)
            tally.add(f"write {family} delete", deletes)
        return to_write_batch(self, handles)

    StagedBatch.to_write_batch = counted_write_batch

    scan = TimerReads.scan

    def counted_scan(self, wheel, lo, hi, limit):
        entries = scan(self, wheel, lo, hi, limit)
        tally.add(f"read wheel_{wheel} scan", len(entries))
        return entries

    TimerReads.scan = counted_scan

    read_records = range_reads.read_records

    def counted_read_records(family, wanted):
        tally.add("read messages", len(wanted))
        return read_records(family, wanted)

    timer_store_module.read_records = counted_read_records

    read_ready_raw = TimerReads.read_ready_raw

    def counted_ready(self, *args, **kwargs):
        rows = read_ready_raw(self, *args, **kwargs)
        tally.add("read ready (+ its messages)", len(rows))
        return rows

    TimerReads.read_ready_raw = counted_ready

    read_raw = FiredCache.read_raw

    def counted_cache(self, *args, **kwargs):
        rows = read_raw(self, *args, **kwargs)
        if rows is not None:
            tally.add("fired records from memory (no read)", len(rows))
        return rows

    FiredCache.read_raw = counted_cache

    def switch(on: bool) -> None:
        tally.part = "measured" if on else "after"

    engine_virtual.collect = switch


def tally_next_step(tally: Tally):
    """For `step_costs.steps`: at the end of each step, tally under the next one's name."""

    def ended(name: str) -> None:
        following = step_costs.STEPS.index(name) + 1
        tally.part = step_costs.STEPS[following] if following < len(step_costs.STEPS) else "end"

    return ended


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.entries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--steps", action="store_true", help="each step of bench.step_costs")
    given = parser.parse_args()
    # engine_bench's defaults for `burst` (its --body, --lead-s, --in-flight).
    args = argparse.Namespace(
        timers=given.timers, body=100, lead_s=40, in_flight=20_000,
        fire_first=False, no_sync=False, delivery_traces=False, assignments=[],
    )  # fmt: skip
    tally = Tally()
    instrument(tally)
    with tempfile.TemporaryDirectory(prefix="timerwheel-entries-") as data_dir:
        if given.steps:
            tally.part = step_costs.STEPS[0]
            names = step_costs.steps(given.timers, data_dir, tally_next_step(tally))
            counts = {name: tally.counts[name] for name in names if name in tally.counts}
        else:
            engine_virtual.burst(args, data_dir)
            counts = {part: tally.counts[part] for part in PARTS}
    print(json.dumps({
        "timers": given.timers,
        **{part: {what: round(count / given.timers, 3)
                  for what, count in sorted(counted.items()) if count}
           for part, counted in counts.items()},
    }))  # fmt: skip


if __name__ == "__main__":
    main()
