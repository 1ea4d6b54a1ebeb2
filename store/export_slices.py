"""Writing rows into slice files: the export's inner loops, shared by both ways to run it.

timerwheel.store.export runs them in its own process for a small store;
timerwheel.store.export_parallel runs them in worker processes, each over one key range of the
checkpoint. `SliceWriter` decides which file every row goes to (the rules are in
timerwheel.store.export's docstring) and `CheckpointReader` is the checkpoint opened read-only, with
bounded range scans.

A writer given a key range (`lo` <= key < `hi`) and a `prefix` writes files named
``PREFIX<family>-s<slice>...`` with slice numbers that start at 0 in its range; the
parallel orchestration renames them to their place in the whole export afterwards.
"""

from __future__ import annotations

import gc
import re
from bisect import bisect_right
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from itertools import chain

from rocksdict import AccessType, Options, Rdict, ReadOptions

from timerwheel.store import keys, records
from timerwheel.store.export_files import MAX_FILE_BYTES, WHEEL_FAMILIES, SstSink, file_crc32

PROGRESS_EVERY_ROWS = 100_000

Progress = Callable[[int], None]
Row = tuple[bytes, bytes]


class SliceWriter:
    """Writes the slices; see timerwheel.store.export's docstring for how rows are assigned to
    them."""

    def __init__(
        self, directory: str, max_rows: int, progress: Progress | None, prefix: str = ""
    ) -> None:
        self.directory = directory
        self.max_rows = max_rows
        self.progress = progress
        self.prefix = prefix  # file names: PREFIX + the export's own name
        self.rows = 0  # rows in finished files
        self._phase_base = 0  # rows written before the current phase (wheels, messages)
        self.slice_count = 0
        self.first_wheel_key: bytes | None = None  # of slice 0, once write_wheels ran
        self.files: list[dict] = []  # manifest entries of the finished files, in order
        # A finished file's CRC-32 reads it back, from disk (SstFileWriter drops what it
        # wrote from the page cache). One thread does that while the rows go on: zlib
        # releases the GIL. Every entry has its crc32 when a write_* returns.
        self._checksums = ThreadPoolExecutor(1, thread_name_prefix="export-crc32")
        self._unsummed: list[tuple[dict, Future]] = []

    def __enter__(self) -> SliceWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        for _, future in self._unsummed:
            future.cancel()
        self._checksums.shutdown(wait=True)  # no thread outlives the writer

    def write_wheels(
        self, cut: CheckpointReader, lo: bytes = b"", hi: bytes | None = None
    ) -> list[bytes]:
        """Merge the wheels' keys in [lo, hi) by key; returns the first wheel key of
        every slice after the 0th (`first_wheel_key` is slice 0's).

        The merge goes run by run (`merge_runs`): the wheels hold mostly disjoint time
        ranges, so a run is long, and its rows go into the slice's file of that wheel
        in a tight loop (`SstSink.put_rows`), at most up to the slice's end or the next
        progress report."""
        streams = {family: cut.items(family, lo, hi) for family in WHEEL_FAMILIES}
        max_rows = self.max_rows
        boundaries: list[bytes] = []
        sinks = self._new_slice()
        in_slice = done = 0
        for family, rows in merge_runs(streams):
            while True:
                if in_slice == max_rows:  # the slice is full: a next row starts a new one
                    head = next(rows, None)
                    if head is None:
                        break
                    self._finish(*sinks.values())
                    boundaries.append(head[0])
                    sinks = self._new_slice()
                    sinks[family].put(*head)
                    in_slice = 1
                    done = self._count(done, 1)
                room = min(max_rows - in_slice, PROGRESS_EVERY_ROWS - done % PROGRESS_EVERY_ROWS)
                added = sinks[family].put_rows(rows, room)
                if self.first_wheel_key is None and added:
                    self.first_wheel_key = sinks[family].first_key
                in_slice += added
                done = self._count(done, added)
                if added < room:
                    break  # the run is over
        self._finish(*sinks.values())
        self._settle_checksums()
        self._progress(done)
        return boundaries

    def write_messages(self, items: Iterator[tuple[bytes, bytes]], boundaries: list[bytes]) -> None:
        """Each record goes to the slice of its wheel key (deliver_at_ms + id).

        The loop runs once a record, so it stays in bytes: the wheel key's time is cut
        out of the record (`records.DELIVER_AT_TIME_BOUND`), and a file's time range is
        kept as those bytes (they compare as the times do) and decoded when it closes."""
        sinks = [self._message_sink(index, 0) for index in range(self.slice_count)]
        time_bytes, wheel_key_at = records.DELIVER_AT_TIME_BOUND, keys.wheel_key_at
        max_rows = self.max_rows
        done = 0
        for message_id, raw in items:
            time_bound = raw[time_bytes]
            sink = sinks[bisect_right(boundaries, wheel_key_at(time_bound, message_id))]
            rows = sink.rows
            if rows == max_rows or (not rows % 1024 and sink.size() >= MAX_FILE_BYTES):
                self._finish(sink)
                sink = self._message_sink(sink.slice_index, sink.part + 1)
                sinks[sink.slice_index] = sink
                rows = 0
            if not rows:
                sink.min_time_bound = sink.max_time_bound = time_bound
            elif time_bound < sink.min_time_bound:
                sink.min_time_bound = time_bound
            elif time_bound > sink.max_time_bound:
                sink.max_time_bound = time_bound
            sink.put(message_id, raw)
            done += 1
            if not done % PROGRESS_EVERY_ROWS:
                self._progress(done)
        self._finish(*sinks)
        self._settle_checksums()
        self._progress(done)

    def start_phase(self) -> None:
        self._phase_base = self.rows

    def _new_slice(self) -> dict[str, SstSink]:
        index = self.slice_count
        self.slice_count += 1
        return {
            family: SstSink(
                self.directory, f"{self.prefix}{family}-s{index:05d}.sst", family, index, 0
            )
            for family in WHEEL_FAMILIES
        }

    def _message_sink(self, index: int, part: int) -> SstSink:
        name = f"{self.prefix}{keys.CF_MESSAGES}-s{index:05d}-{part:03d}.sst"
        return SstSink(self.directory, name, keys.CF_MESSAGES, index, part)

    def _finish(self, *sinks: SstSink) -> None:
        for sink in sinks:
            if sink.rows:
                wheel = sink.family != keys.CF_MESSAGES  # wheel keys come in time order
                low = sink.first_key if wheel else sink.min_time_bound
                high = sink.last_key if wheel else sink.max_time_bound
                sink.min_time_ms, sink.max_time_ms = keys.key_time_ms(low), keys.key_time_ms(high)
            entry = sink.finish()
            if entry is not None:
                self.rows += entry["rows"]
                self.files.append(entry)
                self._unsummed.append((entry, self._checksums.submit(file_crc32, sink.path)))

    def _settle_checksums(self) -> None:
        for entry, future in self._unsummed:
            entry["crc32"] = future.result()
        self._unsummed.clear()

    def _count(self, done: int, added: int) -> int:
        """`done` + `added` rows of the phase, reporting progress at every
        PROGRESS_EVERY_ROWS crossed."""
        total = done + added
        if total // PROGRESS_EVERY_ROWS != done // PROGRESS_EVERY_ROWS:
            self._progress(total)
        return total

    def _progress(self, rows_in_phase: int) -> None:
        """Report rows written so far: finished files plus the phase's rows in open ones."""
        if self.progress is not None:
            self.progress(self._phase_base + rows_in_phase)


def merge_runs(streams: dict[str, Iterator[Row]]) -> Iterator[tuple[str, Iterator[Row]]]:
    """Merge families' rows by key, as runs: (family, rows) with every row of a run
    ordered before the next row of every other family. Each run must be read to its
    end before the next one is asked for.

    A run ends where its family's next key reaches the smallest next key of the
    others (keys are never shared: a wheel key holds the message id, and a message is
    in one wheel), so rows are compared one by one only while another family has rows
    left; the last family's run is its iterator itself. The wheels hold mostly disjoint
    time ranges (second, then minute, then hour), so there are few runs, and a merge
    row by row (heapq.merge, a Python generator) would cost more than the copy."""
    heads: dict[str, tuple[Row, Iterator[Row]]] = {}
    for family, rows in streams.items():
        first = next(rows, None)
        if first is not None:
            heads[family] = (first, rows)
    while heads:
        family = min(heads, key=lambda name: heads[name][0][0])
        first, rows = heads.pop(family)
        bound = min((head[0] for head, _ in heads.values()), default=None)
        if bound is None:
            yield family, chain((first,), rows)
            return
        stopped: list[Row] = []
        yield family, chain((first,), _below(rows, bound, stopped))
        if stopped:
            heads[family] = (stopped[0], rows)


def _below(rows: Iterator[Row], bound: bytes, stopped: list[Row]) -> Iterator[Row]:
    """`rows` up to the first whose key is >= bound, which goes into `stopped`."""
    for row in rows:
        if row[0] >= bound:
            stopped.append(row)
            return
        yield row


SCAN_READAHEAD_BYTES = 4 * 1024 * 1024


class CheckpointReader:
    """The checkpoint opened read-only with every column family (a context manager).

    Several processes may open the same checkpoint this way at once: read-only opens
    take no lock, and the checkpoint's files never change."""

    def __init__(self, path: str) -> None:
        families = {name: Options(raw_mode=True) for name in keys.ALL_COLUMN_FAMILIES}
        options = Options(raw_mode=True)
        # RocksDB opens SST files with POSIX_FADV_RANDOM by default, which turns off the
        # kernel's read-ahead; the export reads every file front to back, and with the
        # kernel reading ahead, the disk works while the worker processes rows.
        options.set_advise_random_on_open(False)
        self._db = Rdict(
            path,
            options=options,
            column_families=families,
            access_type=AccessType.read_only(),
        )
        self._families = {name: self._db.get_column_family(name) for name in families}
        # An iterator borrows its ReadOptions' upper-bound buffer without keeping it
        # alive (NOTES-rocksdict): they stay referenced here until close.
        self._read_options: list[ReadOptions] = []

    def __enter__(self) -> CheckpointReader:
        return self

    def __exit__(self, *exc: object) -> None:
        # rocksdict keeps the files open while any column-family object is alive.
        self._families.clear()
        self._read_options.clear()
        gc.collect()
        self._db.close()

    def items(
        self, family: str, lo: bytes = b"", hi: bytes | None = None
    ) -> Iterator[tuple[bytes, bytes]]:
        """(key, value) of `family` with lo <= key < hi (hi None: to the end)."""
        column = self._families[family]
        read_options = ReadOptions()
        # One long forward scan of files that may not fit in memory (100M timers: a 30 GB
        # store on a 24 GB machine): read ahead in large chunks, and keep the blocks out
        # of the block cache, where they would only push each other out.
        read_options.set_readahead_size(SCAN_READAHEAD_BYTES)
        read_options.fill_cache(False)
        if hi is not None:
            # set_iterate_lower_bound is broken in rocksdict 0.3.29 (it sets the upper
            # bound): the lower end is a seek (from_key), the upper end a bound.
            read_options.set_iterate_upper_bound(hi)
        self._read_options.append(read_options)
        if lo:
            return iter(column.items(from_key=lo, read_opt=read_options))
        return iter(column.items(read_opt=read_options))

    def file_ranges(self, family: str) -> list[tuple[bytes, bytes, int]]:
        """(first key, last key, live entries) of each SST file of `family`: what RocksDB
        knows without reading the data, for planning key ranges of similar size.

        rocksdict's `live_files` does not say which column family a file belongs to;
        the family's ``rocksdb.sstables`` property lists its file numbers."""
        listing = self._families[family].property_value("rocksdb.sstables") or ""
        numbers = {int(n) for n in re.findall(r"^\s*(\d+):", listing, flags=re.MULTILINE)}
        ranges = []
        for meta in self._db.live_files():
            number = int(re.sub(r"\D", "", meta["name"]) or -1)
            if number in numbers:
                live = max(meta["num_entries"] - meta["num_deletions"], 0)
                ranges.append((meta["start_key"], meta["end_key"], live))
        return ranges

    def meta_summary(self) -> dict:
        """The service's clock and cascade horizons at the cut (absent in an empty store)."""
        meta = self._families[keys.CF_META]
        summary: dict = {}
        for name, meta_key in (
            ("schema_version", keys.META_SCHEMA_VERSION),
            ("service_now_ms", keys.META_NOW_MS),
            ("second_horizon_ms", keys.meta_horizon("second")),
            ("minute_horizon_ms", keys.meta_horizon("minute")),
        ):
            raw = meta.get(meta_key)
            summary[name] = keys.decode_u64(raw) if raw is not None else None
        return summary
