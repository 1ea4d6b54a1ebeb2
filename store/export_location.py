"""Where an export lives: a local directory, or a directory on any filesystem pyarrow knows.

    ExportLocation.parse("/backups/tw")                 # a local path
    ExportLocation.parse("file:///backups/tw")          # the same, as a URI
    ExportLocation.parse("s3://bucket/tw")              # pyarrow.fs.S3FileSystem
    ExportLocation.parse("tw", filesystem=SubTreeFileSystem("/exports", LocalFileSystem()))

A cluster's workers do not share the exporting machine's disk, so `timerwheel export
--out` and `timerwheel report --input` take any URI `pyarrow.fs.FileSystem.from_uri`
understands (``file://``; ``s3://``, ``gs://``, ``hdfs://`` when pyarrow was built with
them and their libraries and credentials are there). A local directory (a plain path or a
``file://`` URI) is used in place; on any other filesystem the export is written to local
staging and uploaded (the SST files first, ``manifest.json`` last, so a reader never sees a
manifest without its files), and a reader fetches each SST file to local temp space
before it reads it (RocksDB ingests files from a local path only).

The location pickles (pyarrow filesystems do), so a Spark data source can carry it to
the executors.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass

import pyarrow.fs as pafs


@dataclass(frozen=True)
class ExportLocation:
    filesystem: pafs.FileSystem
    path: str  # the directory, in `filesystem`'s terms
    text: str  # as the user gave it, for messages

    @classmethod
    def parse(cls, where: str, filesystem: pafs.FileSystem | None = None) -> ExportLocation:
        """`where` on `filesystem`, or a URI, or a local path."""
        if filesystem is not None:
            return cls(filesystem, where.rstrip("/") or "/", where)
        if "://" in where:
            try:
                found, path = pafs.FileSystem.from_uri(where)
            except (ValueError, OSError, ImportError) as exc:
                raise ValueError(
                    f"{where!r}: not a filesystem URI pyarrow can open ({exc})"
                ) from exc
            return cls(found, path.rstrip("/") or "/", where)
        return cls(pafs.LocalFileSystem(), os.path.abspath(where), where)

    @property
    def local_dir(self) -> str | None:
        """The directory as a local path when it is one (used in place), else None."""
        if isinstance(self.filesystem, pafs.LocalFileSystem):
            return self.path
        return None

    def file(self, name: str) -> str:
        return f"{self.path}/{name}"

    def describe(self, name: str = "") -> str:
        """`name` in the location, as the user would write it (error messages)."""
        return f"{self.text.rstrip('/')}/{name}" if name else self.text

    def read_text(self, name: str) -> str:
        with self.filesystem.open_input_stream(self.file(name)) as source:
            return source.read().decode("utf-8")

    def size(self, name: str) -> int | None:
        """Bytes of file `name`, None when it does not exist."""
        info = self.filesystem.get_file_info(self.file(name))
        return None if info.type == pafs.FileType.NotFound else info.size

    def exists(self) -> bool:
        return self.filesystem.get_file_info(self.path).type != pafs.FileType.NotFound

    def is_empty_or_missing(self) -> bool:
        info = self.filesystem.get_file_info(self.path)
        if info.type == pafs.FileType.NotFound:
            return True
        if info.type != pafs.FileType.Directory:
            return False
        selector = pafs.FileSelector(self.path, allow_not_found=True)
        return not self.filesystem.get_file_info(selector)

    def fetch(self, name: str, local_dir: str) -> str:
        """Copy file `name` to `local_dir`; its local path."""
        target = os.path.join(local_dir, name)
        with (
            self.filesystem.open_input_stream(self.file(name)) as source,
            open(target, "wb") as out,
        ):
            shutil.copyfileobj(source, out, length=8 * 1024 * 1024)
        return target

    def upload(self, local_dir: str, last: str) -> None:
        """Copy every file of `local_dir` here, `last` (the manifest) after all the others."""
        self.filesystem.create_dir(self.path, recursive=True)
        names = sorted(os.listdir(local_dir), key=lambda name: name == last)
        for name in names:
            with (
                open(os.path.join(local_dir, name), "rb") as source,
                self.filesystem.open_output_stream(self.file(name)) as out,
            ):
                shutil.copyfileobj(source, out, length=8 * 1024 * 1024)
