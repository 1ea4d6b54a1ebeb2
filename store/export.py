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
``sst_dump`` 7.8 reads), keys and values byte-for-byte as stored (layout: timerwheel.store.keys,
timerwheel.store.records). The export is cut into *slices* of wheel-key space (deliver_at_ms +
message id) so a reader can process one slice without seeing the others:

* the wheels are merged in key (= time) order and a new slice starts every
  ``max_rows_per_file`` wheel rows; each slice has at most one file per wheel;
* every ``messages`` record goes to the slice holding its wheel key, wherever the timer
  is (fired and retired ones too), so the slice's wheel files tell exactly which wheel
  holds each of its scheduled timers. A slice's ``messages`` rows roll over into
  further files at ``max_rows_per_file`` rows or ``MAX_FILE_BYTES``.

Who writes them: below ``parallel_min_rows`` rows (or with ``workers=1``) this process,
over the whole checkpoint; above, ``workers`` spawned processes (default one per CPU),
each over key ranges of the same read-only checkpoint (timerwheel.store.export_parallel). The rows
and the rules are the same; a parallel export has a few more slices (each range starts
one) and a slice may have a messages file from each range of message ids.

A version-2 (batch-level) store is exported in the same files: the format is a public
contract independent of the store's layout (decision 0014, step 5). Its checkpoint is
first turned into the version-1 rows it reads as, through the state join, in a scratch
database of version 1's families beside the checkpoint (timerwheel.store.batch_export says
what those rows keep and lose); that database is then cut exactly as a version-1
checkpoint is, so the slice rules, the manifest and the parallel path (its key ranges
are those of the scratch database) are unchanged. The manifest's `schema_version` is the
source store's; its `key_layout` describes the bytes, which are version 1's.

Nothing half-written looks complete: everything is written into a hidden staging
directory beside ``out_dir`` and renamed into place only after ``manifest.json`` is
written and synced; on any failure the staging directory is removed.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

from rocksdict import Checkpoint

from timerwheel.store import batch_export, export_parallel, keys, records
from timerwheel.store import batch_keys as bk
from timerwheel.store.disk import is_disk_full
from timerwheel.store.export_files import (
    EXPORT_FORMAT,
    EXPORT_FORMAT_VERSION,
    EXPORTED_FAMILIES,
    MANIFEST_NAME,
    SST_FORMAT_VERSION,
    WHEEL_FAMILIES,
    WHEEL_OF_FAMILY,
    sync_tree,
    write_json,
)
from timerwheel.store.export_location import ExportLocation
from timerwheel.store.export_parallel import PARALLEL_MIN_ROWS, SliceFiles
from timerwheel.store.export_slices import CheckpointReader, Progress, SliceWriter
from timerwheel.store.integrity import (
    StoreRefused,
    check_data_dir,
    check_meta,
    check_store_read_only,
)
from timerwheel.store.rocks import RocksDatabase
from timerwheel.wheels.domain import FailedPrecondition

DEFAULT_MAX_ROWS_PER_FILE = 500_000


class ExportError(FailedPrecondition):
    """The export cannot be made; the message names the path and what to do."""


class OutputRefused(ExportError):
    """The output folder cannot take the export: a file, or a folder not empty. The live
    server answers every such refusal in the same words (timerwheel.store.export_root)."""


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
    workers: int | None = None,
    parallel_min_rows: int = PARALLEL_MIN_ROWS,
) -> ExportSummary:
    """Export a *stopped* data dir. A dir in use by a running server is refused.

    `out_dir` is a local dir, or any URI pyarrow's filesystems open, or a path on
    `filesystem` (timerwheel.store.export_location); off this machine the export is made in local
    temp space and then uploaded, manifest last. `workers` and `parallel_min_rows`: as
    for `export_database`."""
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
                data_dir, local, max_rows_per_file=max_rows_per_file, progress=progress,
                workers=workers, parallel_min_rows=parallel_min_rows,
            )  # fmt: skip
            location.upload(local, last=MANIFEST_NAME)
        return dataclasses.replace(summary, out_dir=location.text)
    out_dir = location.local_dir
    if not os.path.isdir(data_dir):
        raise ExportError(f"data dir {data_dir!r} does not exist")
    if not os.path.exists(os.path.join(data_dir, "CURRENT")):
        raise ExportError(f"data dir {data_dir!r} is not a RocksDB database (no CURRENT file)")
    _check_output(out_dir)  # before opening: a bad --out must not touch the store
    try:
        used = not check_data_dir(data_dir)
        batch_layout = used and batch_export.is_batch_layout(data_dir)
        if used and not batch_layout:  # refused before the open for writing touches it
            check_store_read_only(data_dir)
        families = bk.PLANNED_COLUMN_FAMILIES if batch_layout else keys.ALL_COLUMN_FAMILIES
        # refuses a non-store (timerwheel.store.integrity)
        database = RocksDatabase(data_dir, column_families=families)
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
        if batch_layout:
            batch_export.check_batch_meta(database.families, data_dir)
        else:
            check_meta(database)
        return export_database(
            database, out_dir, max_rows_per_file=max_rows_per_file, progress=progress,
            workers=workers, parallel_min_rows=parallel_min_rows,
        )  # fmt: skip
    except (StoreRefused, batch_export.BatchMetaError) as exc:
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
    workers: int | None = None,
    parallel_min_rows: int = PARALLEL_MIN_ROWS,
) -> ExportSummary:
    """Export a consistent cut of an open (possibly live) database into `out_dir`.

    `now_ms` is the clock the cut time is read from (a live engine passes its own).
    `workers`: how many processes write the files (default: one per CPU; 1 = this
    process only, as does a store of fewer than `parallel_min_rows` rows, where starting
    processes would cost more than it saves; timerwheel.store.export_parallel)."""
    if max_rows_per_file < 0:
        raise ExportError(f"max_rows_per_file={max_rows_per_file}: must be >= 0 (0 = default)")
    workers = export_parallel.default_workers() if workers is None else workers
    if workers < 1:
        raise ExportError(f"workers={workers}: must be >= 1")
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
        disk = data_dir_disk(database.path)  # before the export's own files take space
        cut_dir = checkpoint_dir
        if batch_export.is_batch_layout(checkpoint_dir):  # version 2: its version-1 rows
            cut_dir = os.path.join(staging, ".v1-view")
            batch_export.write_v1_view(checkpoint_dir, cut_dir)
            shutil.rmtree(checkpoint_dir)
        with CheckpointReader(cut_dir) as cut:
            meta = cut.meta_summary()
            how = export_parallel.plan(cut, workers, parallel_min_rows)
            if how is None:
                slices = _write_in_process(cut, staging, max_rows, progress)
        if how is not None:  # the workers open the checkpoint themselves
            slices = export_parallel.write_in_parallel(cut_dir, staging, max_rows, how, progress)
        shutil.rmtree(cut_dir)
        meta["workers"] = how.workers if how is not None else 1
        meta["data_dir_disk"] = disk
        manifest = _manifest(slices, meta, cut_at_ms, database.path, started)
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


def data_dir_disk(data_dir: str) -> dict:
    """The data dir's filesystem at the cut, for the capacity report's headroom: bytes
    free (to an unprivileged writer) and in all, and the store's own files (None: unknown)."""
    try:
        usage = shutil.disk_usage(data_dir)
        free, total = usage.free, usage.total
    except OSError:
        free = total = None
    store: int | None = 0
    try:
        with os.scandir(data_dir) as entries:  # RocksDB keeps its files in one folder
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False):
                        store += entry.stat(follow_symlinks=False).st_size
                except FileNotFoundError:  # a live store compacted it away meanwhile
                    pass
    except OSError:
        store = None
    return {"free_bytes": free, "total_bytes": total, "store_bytes": store}


def _write_in_process(
    cut: CheckpointReader, staging: str, max_rows: int, progress: Progress | None
) -> SliceFiles:
    with SliceWriter(staging, max_rows, progress) as writer:
        boundaries = writer.write_wheels(cut)
        writer.start_phase()
        writer.write_messages(cut.items(keys.CF_MESSAGES), boundaries)
    return SliceFiles(writer.files, boundaries, writer.slice_count)


def _check_output(out_dir: str) -> None:
    if os.path.exists(out_dir) and not os.path.isdir(out_dir):
        raise OutputRefused(f"output {out_dir!r} exists and is not a directory")
    if os.path.isdir(out_dir) and os.listdir(out_dir):
        raise OutputRefused(
            f"output dir {out_dir!r} exists and is not empty; choose a new --out directory"
        )


def key_layout() -> dict:
    """The manifest's description of the bytes (the codecs are
    timerwheel.store.keys/timerwheel.store.records)."""
    wheel = {
        "key": f"deliver_at_ms ({keys.TIME_BYTES} B big-endian) + message id (UTF-8)",
        "value": "topic (UTF-8)",
        "time": "deliver_at_ms: the first 8 key bytes",
    }
    return {
        "integers": "fixed-width big-endian unsigned: byte order equals time order",
        "store_schema_version": keys.SCHEMA_VERSION,
        "record_version": records.RECORD_WITH_DELIVERY,  # the newest; 1 is read the same
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
    slices: SliceFiles, meta: dict, cut_at_ms: int, source: str, started: float,
) -> dict:  # fmt: skip
    families = {
        family: {"rows": 0, "files": 0, "bytes": 0, "wheel": WHEEL_OF_FAMILY.get(family)}
        for family in EXPORTED_FAMILIES
    }
    for entry in slices.files:
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
        "slice_count": slices.slice_count,
        "slice_starts_hex": [boundary.hex() for boundary in slices.boundaries],
        "files": slices.files,
        "totals": {
            "rows": sum(f["rows"] for f in families.values()),
            "files": len(slices.files),
            "bytes": sum(f["bytes"] for f in families.values()),
            "families": families,
        },
    }  # fmt: skip
