"""A RocksDB handle whose WAL syncs fail: the disk going away under a running engine."""

from __future__ import annotations


class FailingSyncs:
    """The real Rdict, except that every `flush_wal` fails (the disk is gone)."""

    def __init__(self, inner) -> None:
        self.inner = inner

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def flush_wal(self, sync: bool = True) -> None:
        raise OSError("injected: the disk is gone")
