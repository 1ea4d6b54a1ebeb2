"""Reading many records at once: one pass of an iterator where their keys are neighbours,
a multi-get for the rest.

The writer reads records in groups: a fire chunk's (up to 10,000 timers due in the same
few milliseconds), an Ack's (ids in the order they fired), the sweep's. Server-made ids
begin with the deliver time (timerwheel.engine.ids), so such a group is mostly one contiguous run
of `messages`. Walking that run with one iterator costs about half to two thirds of a
multi-get of the same keys, from SST files or the memtable, in groups of tens to
thousands (`python -m bench.read_bench`; docs/lab-log.md has the runs). A multi-get seeks
each key on its own, through the bloom filter, the index and the block, where the
iterator steps to the next entry of a block it holds.

The walk stops early where the run is not contiguous: records that are not wanted (other
topics' timers, cancelled ones kept for their retention, client-chosen ids that sort
elsewhere) are read and dropped, and once it has dropped more than it kept, by
`MIN_SKIPS`, or `MAX_SKIPPED_BYTES` of them, it gives up. Every wanted key it passed and
did not meet is absent; the keys it did not reach are read by one multi-get, as before.
So a walk reads at most two records for each one it keeps, about what a multi-get pays
for that one, and a scattered group costs a multi-get plus at most `MIN_SKIPS` records.
"""

from __future__ import annotations

from rocksdict import ReadOptions

MIN_GROUP = 16  # fewer keys: one multi-get (an iterator's set-up is a few keys' worth)
MIN_SKIPS = 16  # records a walk may drop beyond those it keeps before it gives up
MAX_SKIPPED_BYTES = 1 << 20  # bodies may be megabytes: never copy many unwanted ones


def read_records(family, wanted: list[bytes]) -> dict[bytes, bytes | None]:
    """The value of every key in `wanted` (distinct), None where there is none, as of
    one moment for a single writer's data (a walk and a multi-get, each reading the
    latest committed values)."""
    if len(wanted) < MIN_GROUP:
        return dict(zip(wanted, family.get(wanted), strict=True))
    ordered = sorted(wanted)
    found, passed = _walk(family, ordered)
    values = dict.fromkeys(ordered)  # absent unless met: the walk saw every key to `passed`
    values.update(found)
    rest = [key for key in ordered if key > passed]
    if rest:
        values.update(zip(rest, family.get(rest), strict=True))
    return values


def _walk(family, ordered: list[bytes]) -> tuple[dict[bytes, bytes], bytes]:
    """Iterate from the first wanted key towards the last, keeping the wanted records,
    until it has dropped `MIN_SKIPS` more than it kept (or too many bytes). Returns them
    and the last key the walk passed: every key up to it was seen."""
    wanted = set(ordered)
    last = ordered[-1]
    skipped = skipped_bytes = 0
    found: dict[bytes, bytes] = {}
    # The ReadOptions holds the upper bound's buffer and must outlive the iteration
    # (timerwheel.store.timer_reads._range: rocksdict 0.3.29 borrows it without keeping it alive).
    read_options = ReadOptions()
    read_options.set_iterate_upper_bound(last + b"\x00")
    for key, value in family.items(from_key=ordered[0], read_opt=read_options):
        if key in wanted:
            found[key] = value
            continue
        skipped += 1
        skipped_bytes += len(value)
        if skipped > len(found) + MIN_SKIPS or skipped_bytes > MAX_SKIPPED_BYTES:
            return found, key
    return found, last
