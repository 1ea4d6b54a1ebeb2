"""Where a live export may write, and whether it may start: the server's export policy.

`TimerAdmin.Export` used to write wherever a caller asked (any path the server could
write, creating parents, with errors that told which paths existed). Now:

* the server writes only below its `export_root`; the request names a relative folder
  (`nightly/monday`). An absolute path, a `..` part, a link that leads out of the root,
  a file, a folder that is not empty or one the server cannot write are all refused with
  one and the same message (INVALID_ARGUMENT, `OUTSIDE_ROOT`), so the answer tells
  nothing about what exists where, and no refusal shows the root's path;
* one export at a time (`ExportSlot`): a second one while the first runs is refused;
* an export must leave `export_reserve_bytes` free on the root's disk (`check_space`).

What it does not stop: someone with write access to the export root itself swapping a
folder for a link between the check and the write. The root belongs to the operator.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Iterator
from contextlib import contextmanager

from timerwheel.wheels.domain import InvalidArgument, Overloaded

# Every refusal of an out_dir says this, whatever the reason (outside the root, a file,
# a folder not empty, a folder the server cannot write), so the answer tells nothing
# about what exists where, and never the root's own path.
OUTSIDE_ROOT = (
    "must be a new or empty folder inside the server's export root, which the server can "
    "write: a relative path, no '..', no link leading out of the root"
)


def without_root(message: str, root: str) -> str:
    """`message` with the export root's path (as given, absolute or resolved) replaced by
    `<export root>`: an error that names a path below the root must not tell where it is."""
    for path in sorted({root, os.path.abspath(root), os.path.realpath(root)}, key=len)[::-1]:
        message = message.replace(path, "<export root>")
    return message


def resolve_in_root(root: str, name: str) -> str:
    """The absolute path of `name` below `root`; InvalidArgument when it would leave it."""
    parts = name.rstrip("/").split("/")
    if (
        not name
        or "\x00" in name
        or os.path.isabs(name)
        or any(part in ("", ".", "..") for part in parts)
    ):
        raise InvalidArgument("out_dir", name, OUTSIDE_ROOT)
    real_root = os.path.realpath(root)
    target = os.path.realpath(os.path.join(real_root, *parts))  # follows existing links
    if target == real_root or os.path.commonpath([real_root, target]) != real_root:
        raise InvalidArgument("out_dir", name, OUTSIDE_ROOT)
    return target


def dir_bytes(path: str) -> int:
    """Bytes of the regular files under `path` (RocksDB's SSTs, WAL, manifest)."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(FileNotFoundError):  # compaction removed it meanwhile
                total += os.stat(os.path.join(root, name)).st_size
    return total


def check_space(out_dir: str, data_dir: str, reserve_bytes: int) -> None:
    """Refuse (RESOURCE_EXHAUSTED) an export that would leave under `reserve_bytes` free.

    The export's SST files hold about what the live store holds. Its checkpoint
    hard-links the store's files when `out_dir` shares their file system and copies them
    otherwise, which then needs as much again while it runs.
    """
    disk = out_dir
    while not os.path.exists(disk):  # the export creates missing folders: their disk
        disk = os.path.dirname(disk)
    data_bytes = dir_bytes(data_dir)
    needed = data_bytes
    if os.stat(disk).st_dev != os.stat(data_dir).st_dev:
        needed += data_bytes
    free = shutil.disk_usage(disk).free
    if free - needed < reserve_bytes:
        raise Overloaded(
            f"export refused: it needs about {needed:,} bytes and the export root's disk has "
            f"{free:,} free, which would leave less than export_reserve_bytes="
            f"{reserve_bytes:,}; free space or lower --export-reserve"
        )


class ExportSlot:
    """At most one export at a time; a second caller is refused, not queued (an export
    reads the whole store and writes as much; two at once only double the load)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()

    @contextmanager
    def take(self) -> Iterator[None]:
        if not self._lock.acquire(blocking=False):
            raise Overloaded("an export is already running; one export at a time, retry later")
        try:
            yield
        finally:
            self._lock.release()
