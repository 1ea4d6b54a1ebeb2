"""The export's files: writing one SST, and reading an export back (manifest + SSTs).

timerwheel.store.export makes the cut and decides which rows go into which file; this module owns
the file-level details both sides share: SST options, checksums, the manifest's
constants, and the reader. rocksdict has no SST reader, so `read_sst` ingests a *copy*
of the file into a throw-away database (``set_move_files(False)``: a move would take
the file away from the export) and iterates that.
"""

from __future__ import annotations

import json
import mmap
import os
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from itertools import islice

from rocksdict import (
    BlockBasedOptions,
    DBCompressionType,
    IngestExternalFileOptions,
    Options,
    Rdict,
    SstFileWriter,
)

from timerwheel.store import keys
from timerwheel.store.export_location import ExportLocation

EXPORT_FORMAT = "timerwheel-sst-export"
EXPORT_FORMAT_VERSION = 1
MANIFEST_NAME = "manifest.json"
MAX_FILE_BYTES = 256 * 1024 * 1024
SST_FORMAT_VERSION = 5  # the newest block-based format Debian's sst_dump 7.8 reads
WHEEL_FAMILIES = tuple(keys.CF_WHEEL.values())  # hour, minute, second
EXPORTED_FAMILIES = (keys.CF_MESSAGES, *WHEEL_FAMILIES)
WHEEL_OF_FAMILY = {family: wheel for wheel, family in keys.CF_WHEEL.items()}


class SstSink:
    """One SST file being written, opened at its first row (an SST cannot be empty).

    `put` is the export's innermost loop, so it does the least it can; the caller keeps
    whatever else it wants to know per file (time ranges) in `min_time_ms`/`max_time_ms`.
    """

    def __init__(self, directory: str, name: str, family: str, slice_index: int, part: int):
        self.path = os.path.join(directory, name)
        self.name = name
        self.family = family
        self.slice_index = slice_index
        self.part = part
        self.rows = 0
        self.first_key = self.last_key = b""
        self.min_time_ms = self.max_time_ms = 0
        # A messages file's time range while it is written, as wheel-key time bytes
        # (records.DELIVER_AT_TIME_BOUND): compared once a row, decoded when it closes.
        self.min_time_bound = self.max_time_bound = b""
        self._writer: SstFileWriter | None = None

    def put(self, key: bytes, value: bytes) -> None:
        """Add a row; keys must come in strictly ascending order."""
        if self._writer is None:
            self._writer = SstFileWriter(options=sst_options())
            self._writer.open(self.path)
            self.first_key = key
        self._writer[key] = value
        self.rows += 1
        self.last_key = key

    def put_rows(self, rows: Iterator[tuple[bytes, bytes]], limit: int) -> int:
        """Add up to `limit` rows from `rows`, taking no more from it; returns how many.

        The export's inner loop for rows that arrive in key order: after the first row,
        a tight loop straight into SstFileWriter, with no Python call of ours per row."""
        if limit <= 0:
            return 0
        first = next(rows, None)
        if first is None:
            return 0
        self.put(*first)
        put = self._writer.__setitem__
        added = 0
        key = first[0]
        for added, (key, value) in enumerate(islice(rows, limit - 1), 1):  # noqa: B007
            put(key, value)
        self.rows += added
        self.last_key = key
        return added + 1

    def size(self) -> int:
        return self._writer.file_size() if self._writer is not None else 0

    def finish(self) -> dict | None:
        """Close the file; its manifest entry, or None when it never got a row. The
        entry's crc32 is None: it reads the file back, so the caller computes it where
        that wait costs nothing (timerwheel.store.export_slices, a thread of its own)."""
        if self._writer is None:
            return None
        self._writer.finish()
        self._writer = None
        return {
            "file": self.name,
            "cf": self.family,
            "slice": self.slice_index,
            "part": self.part,
            "rows": self.rows,
            "bytes": os.path.getsize(self.path),
            "crc32": None,
            "min_time_ms": self.min_time_ms,
            "max_time_ms": self.max_time_ms,
        }


def sst_options() -> Options:
    """Raw mode, block-based format 5, LZ4: readable by stock sst_dump and by rocksdict."""
    options = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_format_version(SST_FORMAT_VERSION)
    options.set_block_based_table_factory(table)
    options.set_compression_type(DBCompressionType.lz4())
    return options


def write_json(path: str, document: dict) -> None:
    with open(path, "w", encoding="utf-8") as out:
        json.dump(document, out, indent=2)
        out.write("\n")
        out.flush()
        os.fsync(out.fileno())


def file_crc32(path: str) -> int:
    """CRC-32 of a whole file, so a reader can tell a damaged file before using it."""
    with open(path, "rb") as source:
        if os.fstat(source.fileno()).st_size == 0:
            return 0
        with mmap.mmap(source.fileno(), 0, access=mmap.ACCESS_READ) as view:
            return zlib.crc32(view)  # no copy of the file into Python buffers


def sync_tree(directory: str) -> None:
    """fsync every file and the directory, so the rename publishes durable data."""
    for name in os.listdir(directory):
        fd = os.open(os.path.join(directory, name), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# == reading an export back ===========================================================
class ExportFormatError(ValueError):
    """An export is missing, damaged or of another format; the message names the file."""


def load_manifest(export_dir: str | ExportLocation) -> dict:
    """The parsed, checked manifest of an export (a local dir, a URI or an ExportLocation;
    files are checked by `verify_files`)."""
    location = _location(export_dir)
    path = location.describe(MANIFEST_NAME)
    if not location.exists():
        raise ExportFormatError(f"export dir {location.text!r} does not exist")
    try:
        manifest = json.loads(location.read_text(MANIFEST_NAME))
    except FileNotFoundError as exc:
        raise ExportFormatError(
            f"{path}: missing; {location.text!r} is not a finished timerwheel export"
        ) from exc
    except (ValueError, UnicodeError) as exc:
        raise ExportFormatError(f"{path}: corrupt manifest, not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or manifest.get("format") != EXPORT_FORMAT:
        raise ExportFormatError(f"{path}: not a {EXPORT_FORMAT} manifest")
    version = manifest.get("format_version")
    if version != EXPORT_FORMAT_VERSION:
        raise ExportFormatError(
            f"{path}: format_version={version!r}, this reader knows {EXPORT_FORMAT_VERSION}"
        )
    files = manifest.get("files")
    if not isinstance(files, list) or "totals" not in manifest:
        raise ExportFormatError(f"{path}: corrupt manifest, 'files' or 'totals' missing")
    for index, entry in enumerate(files):
        fields = ("file", "cf", "slice", "rows", "bytes", "crc32", "min_time_ms", "max_time_ms")
        if not isinstance(entry, dict) or any(name not in entry for name in fields):
            raise ExportFormatError(f"{path}: corrupt manifest, files[{index}] is incomplete")
        if entry["cf"] not in EXPORTED_FAMILIES or "/" in entry["file"] or os.sep in entry["file"]:
            raise ExportFormatError(f"{path}: files[{index}] is not an exported SST file")
    return manifest


def verify_files(
    export_dir: str | ExportLocation, manifest: dict, *, checksums: bool = True
) -> None:
    """Every SST of the manifest exists with its size (and CRC-32); else name the file.
    Off this machine, only sizes are checked here: reading every byte through one process
    would cost what the report does; the executors check each CRC-32 after their fetch."""
    location = _location(export_dir)
    checksums = checksums and location.local_dir is not None
    for entry in manifest["files"]:
        path = location.describe(entry["file"])
        size = location.size(entry["file"])
        if size is None:
            raise ExportFormatError(f"{path}: SST file listed in the manifest is missing")
        if size != entry["bytes"]:
            raise ExportFormatError(
                f"{path}: corrupt SST, {size} bytes but the manifest says {entry['bytes']}"
            )
        if checksums and file_crc32(location.file(entry["file"])) != entry["crc32"]:
            raise ExportFormatError(f"{path}: corrupt SST, CRC-32 differs from the manifest")


def _location(export_dir: str | ExportLocation) -> ExportLocation:
    if isinstance(export_dir, ExportLocation):
        return export_dir
    try:
        return ExportLocation.parse(export_dir)
    except ValueError as exc:
        raise ExportFormatError(str(exc)) from exc


def read_sst(path: str, scratch_dir: str) -> Iterator[tuple[bytes, bytes]]:
    """Every (key, value) of one SST file, in key order, via a temporary database.

    The database lives in a fresh directory under `scratch_dir` and is removed when the
    iterator is exhausted or closed. Errors name the file.
    """
    work = tempfile.mkdtemp(prefix="sst-read-", dir=scratch_dir)
    db = None
    try:
        try:
            db = Rdict(work, options=Options(raw_mode=True))
            ingest = IngestExternalFileOptions()
            ingest.set_move_files(False)
            db.ingest_external_file([path], ingest)
        except Exception as exc:
            raise ExportFormatError(f"{path}: cannot read SST file ({exc})") from exc
        try:
            yield from db.items()
        except Exception as exc:
            raise ExportFormatError(f"{path}: corrupt SST file ({exc})") from exc
    finally:
        if db is not None:
            db.close()
        shutil.rmtree(work, ignore_errors=True)
