"""Hear a lease end as it ends, instead of at the next periodic read.

A node reads each lease it does not hold once a renewal interval (cluster/lease.py,
`LeaseView.plan`). A lease that expires (its owner died or was cut off: the bucket's TTL
puts a marker with `Nats-Marker-Reason: MaxAge`) or is given back (a hand-off or a stop
deletes it) would be noticed up to one interval late, and every failover would carry that
interval. This watch follows the lease bucket and, for such a marker, tells the node at
once (`on_gone(partition)`), which reads the key at its next tick.

The watch only hastens a read; it decides nothing. So whatever goes wrong with it (an
election, a reconnect, a consumer the server dropped) costs only the speed-up: the periodic
read stays. It is started again after an error, and after a silence longer than
`silent_ms`: the bucket is never silent while any node is up (every owner renews every
interval), so a silent watch is a dead one.

  bucket update            operation   what the node does
  -----------------------  ----------  --------------------------------------------
  renewal, create          PUT         nothing (the periodic read learns the holder)
  give-back (delete)       DEL         reads the key at its next tick
  expiry (TTL marker)      PURGE       reads the key at its next tick
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any, Protocol

import nats.errors
import structlog

log = structlog.get_logger("timerwheel.cluster")

GONE = ("DEL", "PURGE")  # nats-py's operation names for a delete and a purge or expiry
RESTART_AFTER_S = 0.5


class Watcher(Protocol):
    """What a KV watch gives (nats-py's KeyValue.KeyWatcher)."""

    async def updates(self, timeout: float = ...) -> Any: ...

    async def stop(self) -> None: ...


class WatchedBucket(Protocol):
    async def watchall(self, **kwargs: Any) -> Watcher: ...


def partition_of_key(key: str) -> int | None:
    """The partition a lease key names (`p<n>`, cluster/partitions.py), None for any other."""
    if not key.startswith("p") or not key[1:].isdigit():
        return None
    return int(key[1:])


class LeaseWatch:
    """Follows the lease bucket until `closing()`; `on_gone` is called on the watching
    loop, the same loop that steps the leases."""

    def __init__(
        self, bucket: WatchedBucket, on_gone: Callable[[int], None], silent_ms: int
    ) -> None:
        self._bucket = bucket
        self._on_gone = on_gone
        self._silent_s = silent_ms / 1000
        self.started = 0  # watches made (the first, and one after each failure)
        self.heard = 0  # leases heard ending

    async def run(self, closing: Callable[[], bool]) -> None:
        while not closing():
            watcher: Watcher | None = None
            try:
                watcher = await self._bucket.watchall(meta_only=True)
                self.started += 1
                await self._follow(watcher, closing)
            except asyncio.CancelledError:
                raise
            except Exception as error:  # the periodic read stays: only the speed-up is lost
                log.info("cluster_lease_watch_restarted", error=repr(error))
            finally:
                if watcher is not None:  # a dead connection's unsubscribe: nothing to keep
                    with contextlib.suppress(Exception):
                        await watcher.stop()
            if not closing():
                await asyncio.sleep(RESTART_AFTER_S)

    async def _follow(self, watcher: Watcher, closing: Callable[[], bool]) -> None:
        while not closing():
            try:
                entry = await watcher.updates(timeout=self._silent_s)
            except nats.errors.TimeoutError:
                raise TimeoutError(f"lease bucket silent for {self._silent_s} s") from None
            if entry is None:  # the end of the initial state: nothing to act on
                continue
            partition = partition_of_key(getattr(entry, "key", ""))
            if partition is not None and getattr(entry, "operation", None) in GONE:
                self.heard += 1
                self._on_gone(partition)
