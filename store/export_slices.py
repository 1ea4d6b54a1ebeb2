"""Writing rows into slice files: the export's inner loops, shared by both ways to run it.

store.export runs them in its own process for a small store; store.export_parallel runs
them in worker processes, each over one key range of the checkpoint. `SliceWriter`
decides which file every row goes to (the rules are in store.export's docstring) and
`CheckpointReader` is the checkpoint opened read-only, with bounded range scans.

A writer given a key range (`lo` <= key < `hi`) and a `prefix` writes files named
``PREFIX<family>-s<slice>...`` with slice numbers that start at 0 in its range; the
parallel orchestration renames them to their place in the whole export afterwards.
"""

from __future__ import annotations

import bisect
import gc
import heapq
import operator
import re
from collections.abc import Callable, Iterator
from itertools import chain, repeat

from rocksdict import AccessType, Options, Rdict, ReadOptions

from store import keys, records
from store.export_files import MAX_FILE_BYTES, WHEEL_FAMILIES, SstSink

PROGRESS_EVERY_ROWS = 100_000

Progress = Callable[[int], None]


class SliceWriter:
    """Writes the slices; see store.export's docstring for how rows are assigned to them."""

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

    def write_wheels(
        self, cut: CheckpointReader, lo: bytes = b"", hi: bytes | None = None
    ) -> list[bytes]:
        """Merge the wheels' keys in [lo, hi) by key; returns the first wheel key of
        every slice after the 0th (`first_wheel_key` is slice 0's)."""
        # (key, value, family) rows, tagged in C (map) rather than by a Python generator.
        streams = [
            map(operator.add, cut.items(family, lo, hi), repeat((family,)))
            for family in WHEEL_FAMILIES
        ]
        heads = [(first, stream) for stream in streams if (first := next(stream, None))]
        if heads:
            self.first_wheel_key = min(first[0] for first, _ in heads)
        streams = [chain([first], stream) for first, stream in heads]
        # Mostly one wheel holds nearly everything: no merge needed then.
        merged = heapq.merge(*streams) if len(streams) > 1 else chain(*streams)
        boundaries: list[bytes] = []
        sinks = self._new_slice()
        in_slice = done = 0
        for key, value, family in merged:
            if in_slice == self.max_rows:
                self._finish(*sinks.values())
                boundaries.append(key)
                sinks = self._new_slice()
                in_slice = 0
            sinks[family].put(key, value)
            in_slice += 1
            done += 1
            if not done % PROGRESS_EVERY_ROWS:
                self._progress(done)
        self._finish(*sinks.values())
        self._progress(done)
        return boundaries

    def write_messages(self, items: Iterator[tuple[bytes, bytes]], boundaries: list[bytes]) -> None:
        """Each record goes to the slice of its wheel key (deliver_at_ms + id)."""
        sinks = [self._message_sink(index, 0) for index in range(self.slice_count)]
        deliver_at = records.record_deliver_at_ms
        time_bound = keys.U64.pack  # keys.time_bound, without a Python call per row
        bisect_right = bisect.bisect_right
        max_rows = self.max_rows
        done = 0
        for message_id, raw in items:
            deliver_at_ms = deliver_at(raw)
            sink = sinks[bisect_right(boundaries, time_bound(deliver_at_ms) + message_id)]
            rows = sink.rows
            if rows == max_rows or (not rows % 1024 and sink.size() >= MAX_FILE_BYTES):
                self._finish(sink)
                sink = self._message_sink(sink.slice_index, sink.part + 1)
                sinks[sink.slice_index] = sink
                rows = 0
            if not rows:
                sink.min_time_ms = sink.max_time_ms = deliver_at_ms
            elif deliver_at_ms < sink.min_time_ms:
                sink.min_time_ms = deliver_at_ms
            elif deliver_at_ms > sink.max_time_ms:
                sink.max_time_ms = deliver_at_ms
            sink.put(message_id, raw)
            done += 1
            if not done % PROGRESS_EVERY_ROWS:
                self._progress(done)
        self._finish(*sinks)
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
            if sink.family != keys.CF_MESSAGES:  # wheel keys come in time order
                sink.min_time_ms = keys.key_time_ms(sink.first_key) if sink.rows else 0
                sink.max_time_ms = keys.key_time_ms(sink.last_key) if sink.rows else 0
            entry = sink.finish()
            if entry is not None:
                self.rows += entry["rows"]
                self.files.append(entry)

    def _progress(self, rows_in_phase: int) -> None:
        """Report rows written so far: finished files plus the phase's rows in open ones."""
        if self.progress is not None:
            self.progress(self._phase_base + rows_in_phase)


SCAN_READAHEAD_BYTES = 4 * 1024 * 1024


class CheckpointReader:
    """The checkpoint opened read-only with every column family (a context manager).

    Several processes may open the same checkpoint this way at once: read-only opens
    take no lock, and the checkpoint's files never change."""

    def __init__(self, path: str) -> None:
        families = {name: Options(raw_mode=True) for name in keys.ALL_COLUMN_FAMILIES}
        self._db = Rdict(
            path,
            options=Options(raw_mode=True),
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
