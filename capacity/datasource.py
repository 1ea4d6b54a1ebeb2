"""The PySpark Python Data Source ``timerwheel_sst``: reads an export made by store.export.

    spark.dataSource.register(TimerwheelSstDataSource)
    df = spark.read.format("timerwheel_sst").load("/path/to/export")

One row per stored timer (any state), with the columns of `SCHEMA`. There is one
partition per ``messages`` SST file. The export is cut into slices of wheel-key space
(see store.export), and a slice's wheel files hold exactly the wheel keys of that slice,
so a partition learns which wheel holds each of its scheduled timers by reading only the
wheel files of its own slice: a set lookup per row, no join, no shuffle.

Options: ``verify`` ("checksums" by default, "size" or "none"): how the files are
checked against the manifest before any partition is planned; ``scratch_dir``: where
each task makes the throw-away database it reads an SST through (default: the system
temp dir of the worker).
"""

from __future__ import annotations

import os
import struct
import tempfile
from collections import defaultdict
from collections.abc import Iterator

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition

from store import keys
from store.export_files import (
    WHEEL_OF_FAMILY,
    ExportFormatError,
    load_manifest,
    read_sst,
    verify_files,
)

SOURCE_NAME = "timerwheel_sst"
SCHEMA = (
    "message_id string, topic string, deliver_at_ms bigint, created_at_ms bigint, "
    "body_bytes bigint, state string, wheel string"
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
    ]
)
BATCH_ROWS = 65_536


class SlicePartition(InputPartition):
    """One messages SST file and the wheel files of its slice (paths, wheel names)."""

    def __init__(self, messages_path: str | None, wheel_files: list[tuple[str, str]]) -> None:
        super().__init__(messages_path)
        self.messages_path = messages_path
        self.wheel_files = wheel_files


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
        self.export_dir = path
        self.verify = options.get("verify", "checksums")
        if self.verify not in ("checksums", "size", "none"):
            raise ExportFormatError(f"verify={self.verify!r}: must be checksums, size or none")
        self.scratch_dir = options.get("scratch_dir") or None

    def partitions(self) -> list[SlicePartition]:
        manifest = load_manifest(self.export_dir)
        if self.verify != "none":
            verify_files(self.export_dir, manifest, checksums=self.verify == "checksums")
        return plan_partitions(self.export_dir, manifest)

    def read(self, partition: SlicePartition) -> Iterator[pa.RecordBatch]:
        if partition.messages_path is None:
            return
        scratch = self.scratch_dir or tempfile.gettempdir()
        yield from read_partition(partition, scratch)


def plan_partitions(export_dir: str, manifest: dict) -> list[SlicePartition]:
    """One partition per messages file; at least one, so an empty export reads as empty."""
    wheels_by_slice: dict[int, list[tuple[str, str]]] = defaultdict(list)
    for entry in manifest["files"]:
        wheel = WHEEL_OF_FAMILY.get(entry["cf"])
        if wheel is not None:
            path = os.path.join(export_dir, entry["file"])
            wheels_by_slice[entry["slice"]].append((path, wheel))
    partitions = [
        SlicePartition(os.path.join(export_dir, entry["file"]), wheels_by_slice[entry["slice"]])
        for entry in manifest["files"]
        if entry["cf"] == keys.CF_MESSAGES
    ]
    return partitions or [SlicePartition(None, [])]


def read_partition(partition: SlicePartition, scratch_dir: str) -> Iterator[pa.RecordBatch]:
    """Decode one messages file into Arrow batches of `ARROW_SCHEMA`."""
    from capacity.rows import decode_messages  # imported on the worker

    wheel_keys: list[bytes] = []
    wheel_names: list[str] = []
    for path, wheel in partition.wheel_files:
        before = len(wheel_keys)
        wheel_keys.extend(key for key, _ in read_sst(path, scratch_dir))
        wheel_names.extend([wheel] * (len(wheel_keys) - before))
    try:
        table = decode_messages(
            read_sst(partition.messages_path, scratch_dir), wheel_keys, wheel_names
        )
    except (ValueError, UnicodeError, struct.error, pa.ArrowInvalid) as exc:
        raise ExportFormatError(f"{partition.messages_path}: corrupt record ({exc})") from exc
    yield from table.cast(ARROW_SCHEMA).to_batches(max_chunksize=BATCH_ROWS)
