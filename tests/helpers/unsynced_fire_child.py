"""Child for tests/engine/test_writer_sync.py: fire a timer in a commit that does not fsync, then
die by SIGKILL, so the parent can see what reached the WAL without an fsync.

    python -m tests.helpers.unsynced_fire_child DATA_DIR START_MS

Prints `sent ID` (a synced commit) and, once the fire is committed, `fire_syncs N`: the
WAL syncs the fire's iterations made (0 expected); then it kills itself.
"""

from __future__ import annotations

import os
import signal
import sys

from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings


class CountingSyncs:
    """The real Rdict, counting WAL syncs."""

    def __init__(self, inner) -> None:
        self.inner = inner
        self.syncs = 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def flush_wal(self, sync: bool = True) -> None:
        self.syncs += 1
        self.inner.flush_wal(sync)


def main() -> None:
    data_dir, start_ms = sys.argv[1], int(sys.argv[2])
    clock = VirtualClock(start_ms)
    engine = Engine(Settings(data_dir=data_dir, sync_writes=True), clock, background=False)
    [sent] = engine.send_batch([SendSpec("orders", b"due", When(WhenKind.DELAY, 1_000))])
    print("sent", sent.message_id, flush=True)
    counting = engine.store.database.db = CountingSyncs(engine.store.database.db)
    clock.advance(1_000)
    engine.run_until_idle()  # the fire: no caller waits on it
    print("fire_syncs", counting.syncs, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
