"""Export: a consistent cut of the store as real SST files plus ``manifest.json``.

The cut
-------
rocksdict's snapshot iteration does not isolate (later writes show through), so the cut
is a RocksDB *checkpoint*: ``Checkpoint(db).create_checkpoint`` flushes the memtables and
hard-links (or copies) the live SST files into a new directory at one sequence number.
The running service keeps writing to its own files; the checkpoint is then opened
read-only and streamed into the export. Only the checkpoint is read, so every count in
the manifest is exactly what existed at the cut.

The files
---------
The ``messages`` column family and the three wheel column families are written with
``SstFileWriter`` (block-based ``format_version`` 5 and LZ4, which Debian's stock
``sst_dump`` 7.8 reads), keys and values byte-for-byte as stored (layout: store.keys,
store.records). The export is cut into *slices* of wheel-key space (deliver_at_ms +
message id) so a reader can process one slice without seeing the others:

* the wheels are merged in key (= time) order and a new slice starts every
  ``max_rows_per_file`` wheel rows; each slice has at most one file per wheel;
* every ``messages`` record goes to the slice holding its wheel key, wherever the timer
  is (fired and retired ones too), so the slice's wheel files tell exactly which wheel
  holds each of its scheduled timers. A slice's ``messages`` rows roll over into
  further files at ``max_rows_per_file`` rows or ``MAX_FILE_BYTES``.

Nothing half-written looks complete: everything is written into a hidden staging
directory beside ``out_dir`` and renamed into place only after ``manifest.json`` is
written and synced; on any failure the staging directory is removed.
"""

from __future__ import annotations

import bisect
import dataclasses
import gc
import heapq
import operator
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import chain, repeat

from rocksdict import AccessType, Checkpoint, Options, Rdict

from store import keys, records
from store.disk import is_disk_full
from store.export_files import (
    EXPORT_FORMAT,
    EXPORT_FORMAT_VERSION,
    EXPORTED_FAMILIES,
    MANIFEST_NAME,
    MAX_FILE_BYTES,
    SST_FORMAT_VERSION,
    WHEEL_FAMILIES,
    WHEEL_OF_FAMILY,
    SstSink,
    sync_tree,
    write_json,
)
from store.export_location import ExportLocation
from store.integrity import StoreRefused, check_meta
from store.rocks import RocksDatabase
from wheels.domain import FailedPrecondition

DEFAULT_MAX_ROWS_PER_FILE = 500_000
PROGRESS_EVERY_ROWS = 100_000

Progress = Callable[[int], None]


class ExportError(FailedPrecondition):
    """The export cannot be made; the message names the path and what to do."""


@dataclass(frozen=True)
class ExportSummary:
    out_dir: str
    rows: int  # SST rows written, all column families
    files: int
    timers: int  # rows of `messages`: every stored timer, any state
    bytes: int  # SST bytes written
    cut_at_ms: int  # wall clock when the checkpoint was taken
    seconds: float


def export_data_dir(
    data_dir: str,
    out_dir: str,
    *,
    max_rows_per_file: int = 0,
    progress: Progress | None = None,
    filesystem=None,
) -> ExportSummary:
    """Export a *stopped* data dir. A dir in use by a running server is refused.

    `out_dir` is a local dir, or any URI pyarrow's filesystems open, or a path on
    `filesystem` (store.export_location); off this machine the export is made in local
    temp space and then uploaded, manifest last."""
    try:
        location = ExportLocation.parse(out_dir, filesystem)
    except ValueError as exc:
        raise ExportError(str(exc)) from exc
    if location.local_dir is None:
        if not location.is_empty_or_missing():
            raise ExportError(f"output {location.text!r} exists and is not empty")
        with tempfile.TemporaryDirectory(prefix="timerwheel-export-") as staging:
            local = os.path.join(staging, "export")
            summary = export_data_dir(
                data_dir, local, max_rows_per_file=max_rows_per_file, progress=progress
            )
            location.upload(local, last=MANIFEST_NAME)
        return dataclasses.replace(summary, out_dir=location.text)
    out_dir = location.local_dir
    if not os.path.isdir(data_dir):
        raise ExportError(f"data dir {data_dir!r} does not exist")
    if not os.path.exists(os.path.join(data_dir, "CURRENT")):
        raise ExportError(f"data dir {data_dir!r} is not a RocksDB database (no CURRENT file)")
    _check_output(out_dir)  # before opening: a bad --out must not touch the store
    try:
        database = RocksDatabase(data_dir)  # refuses a non-store (store.integrity)
    except StoreRefused as exc:
        raise ExportError(str(exc)) from exc
    except Exception as exc:
        if "lock" in str(exc).lower():
            raise ExportError(
                f"data dir {data_dir!r} is in use by a running server (its LOCK is held); "
                "export from the live server with --target HOST:PORT instead"
            ) from exc
        raise ExportError(f"cannot open data dir {data_dir!r}: {exc}") from exc
    try:
        check_meta(database)
        return export_database(
            database, out_dir, max_rows_per_file=max_rows_per_file, progress=progress
        )
    except StoreRefused as exc:
        raise ExportError(str(exc)) from exc
    finally:
        database.close()


def export_database(
    database: RocksDatabase,
    out_dir: str,
    *,
    max_rows_per_file: int = 0,
    progress: Progress | None = None,
    now_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
) -> ExportSummary:
    """Export a consistent cut of an open (possibly live) database into `out_dir`.

    `now_ms` is the clock the cut time is read from (a live engine passes its own)."""
    if max_rows_per_file < 0:
        raise ExportError(f"max_rows_per_file={max_rows_per_file}: must be >= 0 (0 = default)")
    max_rows = max_rows_per_file or DEFAULT_MAX_ROWS_PER_FILE
    out_dir = os.path.abspath(out_dir)
    _check_output(out_dir)
    started = time.monotonic()
    parent, name = os.path.split(out_dir)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}.partial-", dir=parent)
    checkpoint_dir = os.path.join(staging, ".checkpoint")
    try:
        Checkpoint(database.db).create_checkpoint(checkpoint_dir)
        cut_at_ms = now_ms()
        with _Checkpoint(checkpoint_dir) as cut:
            writer = _SliceWriter(staging, max_rows, progress)
            boundaries = writer.write_wheels(cut)
            writer.start_phase()
            writer.write_messages(cut.items(keys.CF_MESSAGES), boundaries)
            meta = cut.meta_summary()
        shutil.rmtree(checkpoint_dir)
        manifest = _manifest(writer, boundaries, meta, cut_at_ms, database.path, started)
        write_json(os.path.join(staging, MANIFEST_NAME), manifest)
        sync_tree(staging)
        _check_output(out_dir)  # someone may have filled it meanwhile
        os.rename(staging, out_dir)
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if is_disk_full(exc):
            raise ExportError(
                f"disk full while exporting to {out_dir!r}: nothing was kept; "
                f"free space or choose another --out ({exc})"
            ) from exc
        raise
    totals = manifest["totals"]
    return ExportSummary(
        out_dir=out_dir,
        rows=totals["rows"],
        files=totals["files"],
        timers=totals["families"][keys.CF_MESSAGES]["rows"],
        bytes=totals["bytes"],
        cut_at_ms=cut_at_ms,
        seconds=manifest["seconds"],
    )


def _check_output(out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise ExportError(f"output {out_dir!r} exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise ExportError(
            f"output dir {out_dir!r} exists and is not empty; choose a new --out directory"
        )


class _SliceWriter:
    """Writes the slices; see the module docstring for how rows are assigned to them."""

    def __init__(self, directory: str, max_rows: int, progress: Progress | None) -> None:
        self.directory = directory
        self.max_rows = max_rows
        self.progress = progress
        self.rows = 0  # rows in finished files
        self._phase_base = 0  # rows written before the current phase (wheels, messages)
        self.slice_count = 0
        self.files: list[dict] = []  # manifest entries of the finished files, in order

    def write_wheels(self, cut: _Checkpoint) -> list[bytes]:
        """Merge the wheels by key; returns the first wheel key of every slice after the 0th."""
        # (key, value, family) rows, tagged in C (map) rather than by a Python generator.
        streams = [
            map(operator.add, cut.items(family), repeat((family,))) for family in WHEEL_FAMILIES
        ]
        streams = [chain([first], stream) for stream in streams if (first := next(stream, None))]
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
            family: SstSink(self.directory, f"{family}-s{index:05d}.sst", family, index, 0)
            for family in WHEEL_FAMILIES
        }

    def _message_sink(self, index: int, part: int) -> SstSink:
        name = f"{keys.CF_MESSAGES}-s{index:05d}-{part:03d}.sst"
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


class _Checkpoint:
    """The checkpoint opened read-only with every column family (a context manager)."""

    def __init__(self, path: str) -> None:
        families = {name: Options(raw_mode=True) for name in keys.ALL_COLUMN_FAMILIES}
        self._db = Rdict(
            path,
            options=Options(raw_mode=True),
            column_families=families,
            access_type=AccessType.read_only(),
        )
        self._families = {name: self._db.get_column_family(name) for name in families}

    def __enter__(self) -> _Checkpoint:
        return self

    def __exit__(self, *exc: object) -> None:
        # rocksdict keeps the files open while any column-family object is alive.
        self._families.clear()
        gc.collect()
        self._db.close()

    def items(self, family: str) -> Iterator[tuple[bytes, bytes]]:
        return iter(self._families[family].items())

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


def key_layout() -> dict:
    """The manifest's description of the bytes (the codecs are store.keys/store.records)."""
    wheel = {
        "key": f"deliver_at_ms ({keys.TIME_BYTES} B big-endian) + message id (UTF-8)",
        "value": "topic (UTF-8)",
        "time": "deliver_at_ms: the first 8 key bytes",
    }
    return {
        "integers": "fixed-width big-endian unsigned: byte order equals time order",
        "store_schema_version": keys.SCHEMA_VERSION,
        "record_version": records.RECORD_VERSION,
        "families": {
            keys.CF_MESSAGES: {
                "key": "message id (UTF-8)",
                "value": "timer record, see record_format",
                "time": "deliver_at_ms from the record header",
            },
            **{family: wheel for family in WHEEL_FAMILIES},
        },
        "record_format": " ".join((records.__doc__ or "").split()),
        "slices": "rows are cut into slices of wheel-key space; slice_starts_hex[i] is the "
        "first wheel key of slice i+1; a messages record belongs to the slice of "
        "deliver_at_ms (8 B BE) + message id",
    }


def _manifest(
    writer: _SliceWriter, boundaries: list[bytes], meta: dict, cut_at_ms: int,
    source: str, started: float,
) -> dict:  # fmt: skip
    families = {
        family: {"rows": 0, "files": 0, "bytes": 0, "wheel": WHEEL_OF_FAMILY.get(family)}
        for family in EXPORTED_FAMILIES
    }
    for entry in writer.files:
        totals = families[entry["cf"]]
        totals["rows"] += entry["rows"]
        totals["files"] += 1
        totals["bytes"] += entry["bytes"]
    return {
        "format": EXPORT_FORMAT,
        "format_version": EXPORT_FORMAT_VERSION,
        "sst": {"table": "block_based", "format_version": SST_FORMAT_VERSION,
                "compression": "lz4", "raw_mode": True},
        "key_layout": key_layout(),
        "cut_at_ms": cut_at_ms,
        **meta,
        "source": source,
        "seconds": round(time.monotonic() - started, 3),
        "slice_count": writer.slice_count,
        "slice_starts_hex": [boundary.hex() for boundary in boundaries],
        "files": writer.files,
        "totals": {
            "rows": sum(f["rows"] for f in families.values()),
            "files": len(writer.files),
            "bytes": sum(f["bytes"] for f in families.values()),
            "families": families,
        },
    }  # fmt: skip
