"""The supervisor's runtime dir: the unix sockets of its children and their metrics files.

Each `timerwheel serve --workers N` makes a private dir in the temporary directory
(`tempfile.mkdtemp`: an unguessable `timerwheel-XXXXXXXX`, mode 0700) and removes it when
it stops. A SIGKILLed supervisor cannot remove its own, so its dir, with the children's
`prometheus_client` files, would stay for ever. To find such leftovers safely:

* Each supervisor holds an exclusive `flock` on `supervisor.lock` inside its dir for its
  whole life. The kernel drops the lock when the process dies, however it dies.
* A starting supervisor removes every sibling `timerwheel-*` dir that it owns and whose
  lock it can take: no live process holds it, so its supervisor is gone. A dir whose lock
  is held, one without a lock file (made by an older version, or still being made), one
  of another user and a symlink are left alone.

Why a lock and not the pid in the name: pids are reused, and a temporary directory
shared by containers sees pids of other PID namespaces, so "no such pid" proves nothing;
a lock is on the file, and every process of the kernel sees it.

The lock file is made under a temporary name, locked, then renamed into place, so a
sweeper never finds an unlocked `supervisor.lock` in the dir of a live supervisor.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile

PREFIX = "timerwheel-"
LOCK_NAME = "supervisor.lock"


class RuntimeDir:
    """A private dir for one supervisor's life, locked until `remove` or its death."""

    def __init__(self, path: str, lock_fd: int) -> None:
        self.path = path
        self._lock_fd = lock_fd

    @classmethod
    def create(cls, parent: str | None = None) -> tuple[RuntimeDir, list[str]]:
        """Remove the dead supervisors' dirs in `parent` (default: the temporary
        directory), then make and lock a new one. Returns it and the dirs removed."""
        parent = parent if parent is not None else tempfile.gettempdir()
        swept = sweep_dead(parent)
        path = tempfile.mkdtemp(prefix=PREFIX, dir=parent)
        made = cls(path, -1)
        try:
            staging = os.path.join(path, LOCK_NAME + ".new")
            made._lock_fd = os.open(
                staging, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600
            )
            fcntl.flock(made._lock_fd, fcntl.LOCK_EX)
            os.rename(staging, os.path.join(path, LOCK_NAME))
        except BaseException:
            # Not locked yet, so no sweep would ever remove it (it has no lock file).
            made.remove()
            raise
        return made, swept

    def join(self, name: str) -> str:
        return os.path.join(self.path, name)

    def remove(self) -> None:
        """Remove the dir, then let go of its lock (held until the dir is gone, so no
        sweeper races this)."""
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


def sweep_dead(parent: str) -> list[str]:
    """Remove the runtime dirs in `parent` whose supervisor is dead; returns their paths."""
    removed = []
    with os.scandir(parent) as entries:
        candidates = [e.path for e in entries if e.name.startswith(PREFIX)]
    for path in candidates:
        if _remove_if_dead(path):
            removed.append(path)
    return removed


def _remove_if_dead(path: str) -> bool:
    try:
        info = os.lstat(path)
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid():
            return False  # a symlink, a file, or someone else's
        fd = os.open(os.path.join(path, LOCK_NAME), os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # gone meanwhile, no lock file, or not ours to read
        return False
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False  # its supervisor is alive
        shutil.rmtree(path, ignore_errors=True)
        return not os.path.lexists(path)
    finally:
        with contextlib.suppress(OSError):
            os.close(fd)
