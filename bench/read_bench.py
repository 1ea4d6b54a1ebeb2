"""What reading a group of neighbouring records costs: a multi-get, or timerwheel.store.range_reads
(one iterator over the run, a multi-get for what it did not reach) (not a test).

    python -m bench.read_bench --records 1000000

Real RocksDB in a temporary directory (removed afterwards) with this project's options:
`--records` records of `--body` bytes under server-made ids (deliver time first, as
timerwheel.engine.ids makes them), written in id order. Each case reads every record once, in
groups of neighbouring ids, and reports the CPU a wanted record took each way: groups of
10,000, 1,000, 100 and 20 from SST files (after a flush), groups of 3,000 and 300 of which
every third record is not wanted (a run with timers cancelled in it), and groups of
10,000 of `MEMTABLE_RECORDS` records written after the flush (still in the memtable, as
the records an Ack reads are). Prints one JSON line; docs/lab-log.md has its runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable

from timerwheel.engine.ids import MessageIds
from timerwheel.store.keys import CF_MESSAGES
from timerwheel.store.range_reads import read_records
from timerwheel.store.rocks import RocksDatabase, RocksTuning

MEMTABLE_RECORDS = 100_000  # 15 MB of 150 B records: within one 32 MiB memtable


def _ids(count: int, start_ms: int) -> list[bytes]:
    """`count` server-made ids due one a millisecond from `start_ms`, in key order."""
    ids = MessageIds().take([start_ms + i for i in range(count)])
    return sorted(message_id.encode() for message_id in ids)


def _fill(family, ids: list[bytes], body: bytes) -> None:
    for message_id in ids:
        family[message_id] = body


def _groups(ids: list[bytes], size: int, skip_every: int) -> list[list[bytes]]:
    """Neighbouring ids in groups of `size`; with `skip_every`, every such id left out."""
    groups = []
    for start in range(0, len(ids), size):
        run = ids[start : start + size]
        groups.append([i for n, i in enumerate(run) if not skip_every or n % skip_every])
    return groups


def _us_a_record(read: Callable[[list[bytes]], object], groups: list[list[bytes]]) -> float:
    started = time.process_time()
    for group in groups:
        read(group)
    return round((time.process_time() - started) / sum(map(len, groups)) * 1e6, 3)


def _case(family, ids: list[bytes], size: int, skip_every: int = 0) -> dict:
    groups = _groups(ids, size, skip_every)
    first = groups[0]
    walked, multi = read_records(family, first), dict(zip(first, family.get(first), strict=True))
    if walked != multi:  # the bench measures two ways to one answer, never two answers
        raise AssertionError("timerwheel.store.range_reads and a multi-get disagree")
    return {
        "multi_get_us": _us_a_record(family.get, groups),
        "range_read_us": _us_a_record(lambda group: read_records(family, group), groups),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--body", type=int, default=150, help="bytes a record")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="timerwheel-read-bench-")
    database = RocksDatabase(data_dir, RocksTuning(sync_writes=False))
    try:
        print(json.dumps(_measure(database, args.records, os.urandom(args.body))))
    finally:
        database.close()
        shutil.rmtree(data_dir, ignore_errors=True)


def _measure(database: RocksDatabase, count: int, body: bytes) -> dict:
    messages = database.families[CF_MESSAGES]
    older, recent = _ids(count, 1_700_000_000_000), _ids(MEMTABLE_RECORDS, 1_800_000_000_000)
    _fill(messages, older, body)
    database.db.flush()
    _fill(messages, recent, body)
    figures = {
        "records": count,
        "body_bytes": len(body),
        **{f"sst_{size}": _case(messages, older, size) for size in (10_000, 1_000, 100, 20)},
        **{f"sst_{size}_third_unwanted": _case(messages, older, size, 3) for size in (3_000, 300)},
        "memtable_10000": _case(messages, recent, 10_000),
        "load_average": [round(v, 2) for v in os.getloadavg()],
    }
    del messages  # a column-family object keeps RocksDB's LOCK (timerwheel.store.rocks)
    return figures


if __name__ == "__main__":
    main()
