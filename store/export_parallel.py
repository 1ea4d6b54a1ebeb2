"""Writing an export's slices in several processes, so every core works on it.

One process writes about 300k rows/s (the per-row Python loop: docs/capacity.md), so
a large export is split by key range and written by worker processes, each opening the
same read-only checkpoint itself. The cut and the output are those of the in-process
path (timerwheel.store.export); only the slice boundaries may differ, as every range starts a slice.

Two phases, each a set of tasks handed out to `workers` processes
(`TASKS_PER_WORKER` tasks a worker, so a range that was estimated too small does not
leave a core idle at the end):

1. **Wheels.** Wheel-key space is cut into ranges of about the same number of rows
   (`split_keys`, from the sizes RocksDB keeps per SST file: no pass over the data).
   Each task merges the three wheels over its range and starts a slice every
   `max_rows` rows, as the in-process path does over everything. The parent then
   numbers the slices in key order; the global boundaries are each range's first key
   and the boundaries inside it.
2. **Messages.** `messages` is keyed by message id, not by time, so its id space is cut
   into ranges instead. Each task reads its ids once and writes every record into the
   slice of its wheel key (a bisect over the global boundaries), as the in-process path
   does; a slice therefore gets one messages file (or more: the usual roll-over) from
   each task that had some of its records: ``part`` numbers them within the slice.

Workers write under temporary names (``.wNNN-…``) and the parent renames them in
place, so the names and the manifest are the same as the in-process path's.

Processes are started with ``spawn``: the export may run inside the server's engine
process, and forking a process with RocksDB and gRPC threads is unsafe. On any failure
(a worker's error, a full disk, Ctrl-C) the parent raises a shared stop flag, which
every worker checks at each progress report (every `PROGRESS_EVERY_ROWS` rows), and
waits until the pool has shut down before timerwheel.store.export removes the staging directory.
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import signal
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import FIRST_EXCEPTION, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass

from timerwheel.store import keys
from timerwheel.store.export_files import WHEEL_FAMILIES
from timerwheel.store.export_slices import CheckpointReader, Progress, SliceWriter

TASKS_PER_WORKER = 2
# Below this many rows (all exported families, estimated) the export stays in-process:
# starting a spawned worker (a fresh interpreter importing rocksdict) costs about what
# writing 100k+ rows does.
PARALLEL_MIN_ROWS = 400_000
POLL_SECONDS = 0.5  # how often the parent reports progress while workers write
# Tests set this to a function run at the start of every worker (e.g. to inject a fault
# there: a monkeypatch in the parent does not reach a spawned process).
WORKER_INITIALIZER: Callable[[], None] | None = None

KeyRange = tuple[bytes, bytes | None]  # lo <= key < hi; hi None: to the end


class ExportStopped(RuntimeError):
    """Raised in a worker when the parent has given up on the export."""


@dataclass(frozen=True)
class Plan:
    workers: int
    wheel_ranges: list[KeyRange]
    message_ranges: list[KeyRange]


@dataclass(frozen=True)
class SliceFiles:
    """What the manifest needs from the writing, by either path."""

    files: list[dict]
    boundaries: list[bytes]  # first wheel key of every slice after the 0th
    slice_count: int


def default_workers() -> int:
    return os.cpu_count() or 1


def plan(cut: CheckpointReader, workers: int, min_rows: int = PARALLEL_MIN_ROWS) -> Plan | None:
    """The ranges for `workers` processes, or None when the export should stay in-process
    (one worker, or fewer than `min_rows` rows by RocksDB's per-file counts)."""
    if workers < 2:
        return None
    wheel_files = [span for family in WHEEL_FAMILIES for span in cut.file_ranges(family)]
    message_files = cut.file_ranges(keys.CF_MESSAGES)
    if sum(rows for *_, rows in wheel_files + message_files) < min_rows:
        return None
    parts = workers * TASKS_PER_WORKER
    return Plan(
        workers,
        _ranges(split_keys(wheel_files, parts)),
        _ranges(split_keys(message_files, parts)),
    )


_WIDTH = 16  # key bytes that place a key on the line split_keys interpolates over


def _position(key: bytes) -> int:
    return int.from_bytes(key[:_WIDTH].ljust(_WIDTH, b"\0"), "big")


def split_keys(files: list[tuple[bytes, bytes, int]], parts: int) -> list[bytes]:
    """Up to `parts - 1` increasing keys that cut the rows of `files` ((first key, last
    key, rows) each) into parts of about equal size.

    Rows are assumed spread evenly over each file's key range, reading a key's first 16
    bytes as a number (wheel keys start with the time, server-made ids with the send
    time, so this is roughly even in time). Only the balance depends on the estimate:
    any increasing keys cut the rows correctly.
    """
    spans = [(_position(first), _position(last), rows) for first, last, rows in files if rows]
    if parts < 2 or not spans:
        return []
    total = sum(rows for *_, rows in spans)

    def rows_below(position: int) -> float:
        below = 0.0
        for first, last, rows in spans:
            if position > last:
                below += rows
            elif position > first:  # so last > first
                below += rows * (position - first) / (last - first)
        return below

    lowest = min(first for first, _, _ in spans)
    highest = max(last for _, last, _ in spans)
    splits: list[bytes] = []
    for part in range(1, parts):
        target = total * part / parts
        low, high = lowest, highest  # bisect the monotone rows_below
        while high - low > 1:
            middle = (low + high) // 2
            if rows_below(middle) < target:
                low = middle
            else:
                high = middle
        key = high.to_bytes(_WIDTH, "big")
        if high > lowest and (not splits or key > splits[-1]):
            splits.append(key)
    return splits


def _ranges(splits: list[bytes]) -> list[KeyRange]:
    edges: list = [b"", *splits, None]
    return list(itertools.pairwise(edges))


def write_in_parallel(
    checkpoint_dir: str, staging: str, max_rows: int, how: Plan, progress: Progress | None
) -> SliceFiles:
    """Write every slice file into `staging` with `how.workers` processes. Returns only
    after every worker has stopped, whether it succeeded or not."""
    context = multiprocessing.get_context("spawn")
    tasks = len(how.wheel_ranges) + len(how.message_ranges)
    counters = context.RawArray("q", tasks)  # rows written so far, one slot a task
    stop = context.RawValue("b", 0)
    executor = ProcessPoolExecutor(
        how.workers, mp_context=context, initializer=_start_worker,
        initargs=(counters, stop, WORKER_INITIALIZER),
    )  # fmt: skip
    reported = [-1]

    def report() -> None:
        rows = sum(counters)
        if progress is not None and rows != reported[0]:
            reported[0] = rows
            progress(rows)

    try:
        wheel_tasks = [
            executor.submit(_wheel_task, checkpoint_dir, staging, max_rows, slot, lo, hi)
            for slot, (lo, hi) in enumerate(how.wheel_ranges)
        ]
        files, boundaries, slice_count = _place_wheel_files(staging, _wait(wheel_tasks, report))
        first_slot = len(how.wheel_ranges)
        message_tasks = [
            executor.submit(_messages_task, checkpoint_dir, staging, max_rows, slot, lo, hi,
                            boundaries, slice_count)
            for slot, (lo, hi) in enumerate(how.message_ranges, start=first_slot)
        ]  # fmt: skip
        files += _place_message_files(staging, _wait(message_tasks, report))
        report()
    except BaseException:
        stop.value = 1  # running tasks end at their next progress report
        raise
    finally:
        executor.shutdown(wait=True, cancel_futures=True)
    return SliceFiles(files, boundaries, slice_count)


def _wait(futures: list[Future], report: Callable[[], None]) -> list:
    """The tasks' results in submission order; the first failure is raised at once."""
    pending = set(futures)
    while pending:
        done, pending = wait(pending, timeout=POLL_SECONDS, return_when=FIRST_EXCEPTION)
        for future in done:
            future.result()
        report()
    return [future.result() for future in futures]


def _place_wheel_files(staging: str, results: list[dict]) -> tuple[list[dict], list[bytes], int]:
    """Number the ranges' slices in key order and give their files their final names."""
    files: list[dict] = []
    boundaries: list[bytes] = []
    slice_count = 0
    for result in results:  # in key order
        if not result["files"]:
            continue  # an empty range makes no slice
        if slice_count:
            boundaries.append(result["first_key"])
        boundaries.extend(result["boundaries"])
        for entry in result["files"]:
            index = slice_count + entry["slice"]
            files.append(_rename(staging, entry, f"{entry['cf']}-s{index:05d}.sst", index, 0))
        slice_count += result["slice_count"]
    return files, boundaries, max(slice_count, 1)  # an empty export still has slice 0


def _place_message_files(staging: str, results: list[list[dict]]) -> list[dict]:
    """Number each slice's messages files 0, 1, ... (by task, then roll-over order)."""
    by_slice: dict[int, list[dict]] = defaultdict(list)
    for entries in results:
        for entry in entries:
            by_slice[entry["slice"]].append(entry)
    placed = []
    for index in sorted(by_slice):
        for part, entry in enumerate(by_slice[index]):
            name = f"{keys.CF_MESSAGES}-s{index:05d}-{part:03d}.sst"
            placed.append(_rename(staging, entry, name, index, part))
    return placed


def _rename(staging: str, entry: dict, name: str, slice_index: int, part: int) -> dict:
    os.rename(os.path.join(staging, entry["file"]), os.path.join(staging, name))
    return {**entry, "file": name, "slice": slice_index, "part": part}


# == in the worker processes ============================================================
_counters = None
_stop = None


def _start_worker(counters, stop, initializer: Callable[[], None] | None) -> None:
    global _counters, _stop
    # Ctrl-C reaches the whole process group; the parent decides, and raises `stop`.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _counters, _stop = counters, stop
    if initializer is not None:
        initializer()


def _reporter(slot: int) -> Progress:
    def report(rows: int) -> None:
        _counters[slot] = rows
        if _stop.value:
            raise ExportStopped("the export was stopped")

    return report


def _prefix(slot: int) -> str:
    return f".w{slot:03d}-"


def _wheel_task(
    checkpoint_dir: str, staging: str, max_rows: int, slot: int, lo: bytes, hi: bytes | None
) -> dict:
    with (
        CheckpointReader(checkpoint_dir) as cut,
        SliceWriter(staging, max_rows, _reporter(slot), _prefix(slot)) as writer,
    ):
        boundaries = writer.write_wheels(cut, lo, hi)
    return {
        "first_key": writer.first_wheel_key,
        "boundaries": boundaries,
        "slice_count": writer.slice_count,
        "files": writer.files,
    }


def _messages_task(
    checkpoint_dir: str, staging: str, max_rows: int, slot: int, lo: bytes, hi: bytes | None,
    boundaries: list[bytes], slice_count: int,
) -> list[dict]:  # fmt: skip
    with (
        CheckpointReader(checkpoint_dir) as cut,
        SliceWriter(staging, max_rows, _reporter(slot), _prefix(slot)) as writer,
    ):
        writer.slice_count = slice_count
        writer.write_messages(cut.items(keys.CF_MESSAGES, lo, hi), boundaries)
    return writer.files
