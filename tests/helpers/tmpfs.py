"""A real tmpfs of a given size, and ways to fill it: the disk-full tests' equipment.

Mounting needs root; where it is not permitted the test is skipped with mount's reason.
The mount is always undone (lazily, if something still holds it), so no test leaves one.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

PAGE = 4096  # tmpfs hands out space in pages


@contextlib.contextmanager
def tmpfs(mount_point: Path, size_mb: int) -> Iterator[Path]:
    mount_point.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(mount_point)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip() or mounted.returncode}")
    try:
        yield mount_point
    finally:
        unmounted = subprocess.run(
            ["umount", str(mount_point)], capture_output=True, text=True, timeout=30
        )
        if unmounted.returncode != 0:  # something still holds it: detach, never leak it
            subprocess.run(["umount", "-l", str(mount_point)], check=False, timeout=30)


def free_bytes(path: Path) -> int:
    stat = os.statvfs(path)
    return stat.f_bavail * stat.f_frsize


def write_ballast(path: Path, size: int) -> Path:
    """A file of `size` bytes (written, so tmpfs really holds them)."""
    with open(path, "wb") as file:
        chunk = b"\1" * (1024 * 1024)
        for _ in range(size // len(chunk)):
            file.write(chunk)
        file.write(b"\1" * (size % len(chunk)))
    return path


def fill_up(path: Path) -> None:
    """Take every byte still free on `path`'s disk (until ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        with contextlib.suppress(OSError):
            while True:
                os.write(fd, b"\1" * PAGE)
    finally:
        os.close(fd)


def free_up_to(ballast: Path, target_free: int) -> int:
    """Shrink `ballast` so that its disk has `target_free` bytes free, rounded up to a
    whole page; the free space then."""
    disk = ballast.parent
    missing = target_free - free_bytes(disk)
    if missing > 0:
        pages = -(-missing // PAGE)
        os.truncate(ballast, max(os.path.getsize(ballast) - pages * PAGE, 0))
    return free_bytes(disk)
