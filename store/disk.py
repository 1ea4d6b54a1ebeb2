"""What the store needs to know about its disk: is an error "disk full", how much is free,
and how much a (re)open of the store needs free.

RocksDB reports ENOSPC as a plain Exception whose text carries the OS message ('IO error:
No space left on device: While appending to file: ...'); Python's own file calls raise
OSError with errno ENOSPC. Both exports and the writer use this one test.

**What an open for writing needs.** Opening a store replays its WAL into memtables and,
before it deletes a WAL file, writes those memtables out as table files (RocksDB's
recovery flush), then a new MANIFEST, OPTIONS file, info LOG and WAL. So it needs free
space for the WAL's contents a second time: with incompressible bodies the tables come
out at the WAL's size (a tenth of a percent above it, for their index and filter
blocks), compressible ones smaller. `reopen_needs_bytes` is that figure: the WAL files'
size, 2% more, and 1 MiB for the small files. RocksDB flushes once the WAL passes
4 x `write_buffer_bytes` (its cap, `store/rocks.py`), so the figure is about
4 x 32 MiB x 1.02 + 1 MiB = 131.6 MiB at most with the default settings, and far less
while the memtables hold little. An open with less free space fails on ENOSPC (and
leaves the store closed), so the writer waits for the figure before it tries, and a
start below it opens the store read-only (`timerwheel.store.open_store`).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil

REOPEN_SLACK_BYTES = 1024 * 1024  # the new MANIFEST, OPTIONS, info LOG and WAL's start
REOPEN_WAL_PERCENT = 2  # tables from a WAL: at most its size plus their index and filters


def is_disk_full(exc: BaseException) -> bool:
    """True when `exc` (or what it was raised from) says the disk has no space left."""
    while exc is not None:
        if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
            return True
        if "no space left on device" in str(exc).lower():
            return True
        exc = exc.__cause__
    return False


def free_bytes(path: str) -> int | None:
    """Bytes an unprivileged writer may still use on `path`'s filesystem (None: unknown)."""
    try:
        return shutil.disk_usage(path).free
    except OSError:
        return None


def wal_bytes(path: str) -> int:
    """The size of the RocksDB WAL files (`*.log`) in the data dir `path`."""
    total = 0
    try:
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.name.endswith(".log") and entry.is_file():
                    with contextlib.suppress(OSError):  # deleted meanwhile (flushed)
                        total += entry.stat().st_size
    except OSError:
        return 0
    return total


def reopen_needs_bytes(path: str) -> int:
    """The free space an open for writing of the store in `path` needs (module doc)."""
    wal = wal_bytes(path)
    return wal + wal * REOPEN_WAL_PERCENT // 100 + REOPEN_SLACK_BYTES


def mib(size: int | None) -> str:
    """`size` bytes as an operator reads it: '25.3 MiB' ('unknown' for None)."""
    return "unknown" if size is None else f"{size / (1024 * 1024):.1f} MiB"
