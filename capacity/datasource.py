"""The PySpark Python Data Source ``timerwheel_sst``: reads an export made by
timerwheel.store.export.

    spark.dataSource.register(TimerwheelSstDataSource)
    df = spark.read.format("timerwheel_sst").load("/path/to/export")

One row per stored timer (any state), with the columns of `SCHEMA`. There is one
partition per slice. The export is cut into slices of wheel-key space (see timerwheel.store.export),
and a slice's wheel files hold exactly the wheel keys of that slice, so a partition learns
which wheel holds each of its scheduled timers by reading only the wheel files of its own
slice: a set lookup per row, no join, no shuffle. A slice's records may be in several
``messages`` files (a parallel export writes one per message-id range, and a large slice
rolls over); its partition reads the wheel files once and then each of them.

The path is a local directory or any URI pyarrow's filesystems open
(timerwheel.store.export_location); off this machine each task fetches its files to its local temp
space and checks their CRC-32 there. Options: ``verify`` ("checksums" by default, "size" or "none"):
how the files are checked against the manifest before any partition is planned (sizes only for a
remote export); ``scratch_dir``: where each task makes the throw-away database it reads an SST
through, and its fetched copies (default: the system temp dir of the worker);
``filesystem``: a pyarrow filesystem object the path is on (`filesystem_option`).
"""

from __future__ import annotations

import base64
import pickle
import shutil
import struct
import tempfile
from collections import defaultdict
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from timerwheel.store import keys
from timerwheel.store.export_files import (
    WHEEL_OF_FAMILY,
    ExportFormatError,
    file_crc32,
    load_manifest,
    read_sst,
    verify_files,
)
from timerwheel.store.export_location import ExportLocation

SOURCE_NAME = "timerwheel_sst"
SCHEMA = (
    "message_id string, topic string, deliver_at_ms bigint, created_at_ms bigint, "
    "body_bytes bigint, state string, wheel string, fired_at_ms bigint"
)
ARROW_SCHEMA = pa.schema(
    [
        ("message_id", pa.string()),
        ("topic", pa.string()),
        ("deliver_at_ms", pa.int64()),
        ("created_at_ms", pa.int64()),
        ("body_bytes", pa.int64()),
        ("state", pa.string()),
        ("wheel", pa.string()),
        ("fired_at_ms", pa.int64()),  # null until the timer fired
    ]
)
BATCH_ROWS = 65_536


class SlicePartition(InputPartition):
    """One slice: its messages SST files and its wheel files, (name, crc32) and
    (name, wheel, crc32) each, in `location`."""

    def __init__(
        self,
        location: ExportLocation | None,
        messages: list[tuple[str, int]],
        wheel_files: list[tuple[str, str, int]],
    ) -> None:
        super().__init__(messages[0][0] if messages else None)
        self.location = location
        self.messages = messages
        self.wheel_files = wheel_files

    def describe(self, name: str) -> str:
        return self.location.describe(name)


class TimerwheelSstDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema) -> DataSourceReader:
        return TimerwheelSstReader(dict(self.options))


class TimerwheelSstReader(DataSourceReader):
    def __init__(self, options: dict[str, str]) -> None:
        path = options.get("path")
        if not path:
            raise ExportFormatError("timerwheel_sst needs a path: .load(EXPORT_DIR)")
        filesystem = options.get("filesystem")
        if filesystem:
            filesystem = pickle.loads(base64.b64decode(filesystem))
        try:
            self.location = ExportLocation.parse(path, filesystem or None)
        except ValueError as exc:
            raise ExportFormatError(str(exc)) from exc
        self.verify = options.get("verify", "checksums")
        if self.verify not in ("checksums", "size", "none"):
            raise ExportFormatError(f"verify={self.verify!r}: must be checksums, size or none")
        self.scratch_dir = options.get("scratch_dir") or None

    def partitions(self) -> list[SlicePartition]:
        manifest = load_manifest(self.location)
        if self.verify != "none":
            verify_files(self.location, manifest, checksums=self.verify == "checksums")
        return plan_partitions(self.location, manifest)

    def read(self, partition: SlicePartition) -> Iterator[pa.RecordBatch]:
        if not partition.messages:
            return
        scratch = self.scratch_dir or tempfile.gettempdir()
        yield from read_partition(partition, scratch)


def filesystem_option(filesystem) -> str:
    """The ``filesystem`` option for a pyarrow filesystem object (options are strings)."""
    return base64.b64encode(pickle.dumps(filesystem)).decode("ascii")


def plan_partitions(location: ExportLocation | str, manifest: dict) -> list[SlicePartition]:
    """One partition per slice that has messages; at least one, so an empty export reads
    as empty."""
    if isinstance(location, str):
        location = ExportLocation.parse(location)
    wheels_by_slice: dict[int, list[tuple[str, str, int]]] = defaultdict(list)
    messages_by_slice: dict[int, list[tuple[str, int]]] = defaultdict(list)
    for entry in manifest["files"]:
        wheel = WHEEL_OF_FAMILY.get(entry["cf"])
        if wheel is not None:
            wheels_by_slice[entry["slice"]].append((entry["file"], wheel, entry["crc32"]))
        elif entry["cf"] == keys.CF_MESSAGES:
            messages_by_slice[entry["slice"]].append((entry["file"], entry["crc32"]))
    partitions = [
        SlicePartition(location, messages, wheels_by_slice[index])
        for index, messages in sorted(messages_by_slice.items())
    ]
    return partitions or [SlicePartition(location, [], [])]


def read_partition(partition: SlicePartition, scratch_dir: str) -> Iterator[pa.RecordBatch]:
    """Decode one slice's messages files into Arrow batches of `ARROW_SCHEMA`, one file
    at a time, after reading the slice's wheel keys once. Off this machine, each file is
    fetched to a temp dir under `scratch_dir` first (and its CRC-32 checked); the copies
    are removed when the partition is done."""
    from timerwheel.capacity.rows import decode_messages  # imported on the worker

    fetch_dir = None
    if partition.location.local_dir is None:
        fetch_dir = tempfile.mkdtemp(prefix="sst-fetch-", dir=scratch_dir)
    try:
        wheel_keys: list[bytes] = []
        wheel_names: list[str] = []
        for name, wheel, crc in partition.wheel_files:
            path = _local_copy(partition.location, name, crc, fetch_dir)
            before = len(wheel_keys)
            wheel_keys.extend(key for key, _ in read_sst(path, scratch_dir))
            wheel_names.extend([wheel] * (len(wheel_keys) - before))
        for name, crc in partition.messages:
            path = _local_copy(partition.location, name, crc, fetch_dir)
            try:
                table = decode_messages(read_sst(path, scratch_dir), wheel_keys, wheel_names)
            except (ValueError, UnicodeError, struct.error, pa.ArrowInvalid) as exc:
                where = partition.describe(name)
                raise ExportFormatError(f"{where}: corrupt record ({exc})") from exc
            yield from table.cast(ARROW_SCHEMA).to_batches(max_chunksize=BATCH_ROWS)
    finally:
        if fetch_dir is not None:
            shutil.rmtree(fetch_dir, ignore_errors=True)


def _local_copy(location: ExportLocation, name: str, crc: int, fetch_dir: str | None) -> str:
    if fetch_dir is None:
        return location.file(name)
    path = location.fetch(name, fetch_dir)
    if file_crc32(path) != crc:
        raise ExportFormatError(f"{location.describe(name)}: corrupt SST, CRC-32 differs")
    return path
