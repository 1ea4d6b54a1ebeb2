"""What the store needs to know about its disk: is an error "disk full", how much is free.

RocksDB reports ENOSPC as a plain Exception whose text carries the OS message ('IO error:
No space left on device: While appending to file: ...'); Python's own file calls raise
OSError with errno ENOSPC. Both exports and the writer use this one test.
"""

from __future__ import annotations

import errno
import shutil


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
