"""Child for tests/system/test_faults.py: the real `timerwheel serve`, except that syncing the WAL
fails after `allowed` syncs (as when the disk under the WAL goes away).

    python -m tests.helpers.wal_sync_child ALLOWED serve --data-dir DIR ...

Every RocksDatabase opened in this process gets its Rdict wrapped; everything else is the
unpatched entry point, so the exit code and log lines are those an operator would see.
"""

from __future__ import annotations

import sys

from timerwheel.store import rocks

INJECTED = "injected: fsync of the WAL failed (Input/output error)"


class FailingSync:
    """The real Rdict, except that `flush_wal` raises once `allowed` syncs have run."""

    def __init__(self, inner, allowed: int) -> None:
        self.inner = inner
        self.allowed = allowed

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def flush_wal(self, sync: bool = True) -> None:
        if self.allowed <= 0:
            raise OSError(INJECTED)
        self.allowed -= 1
        self.inner.flush_wal(sync)


def main() -> int:
    allowed = int(sys.argv[1])
    original_open = rocks.RocksDatabase._open

    def failing_open(database: rocks.RocksDatabase) -> None:
        original_open(database)
        database.db = FailingSync(database.db, allowed)

    rocks.RocksDatabase._open = failing_open
    from timerwheel.cli.main import main as cli_main

    return cli_main(sys.argv[2:])


if __name__ == "__main__":
    sys.exit(main())
