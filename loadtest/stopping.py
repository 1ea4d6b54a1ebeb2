"""How a load run (`timerwheel loadtest`, `bench.peer_redis`) stops on SIGTERM.

SIGTERM's default action ends the process at once: the children it started die with it
(they die with their parent), but what it would clean up on the way out stays behind: a
spawned server's data dir (gigabytes after a long run), a Redis server's dir. Turning the
signal into `SystemExit` unwinds the run as Ctrl-C does, so every `with` block stops what
it started and removes what it made.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator


@contextlib.contextmanager
def unwind_on_sigterm(program: str) -> Iterator[None]:
    """Within the block, SIGTERM says so on stderr and raises SystemExit(128 + 15)."""

    def unwind(signum: int, _frame: object) -> None:
        print(f"{program}: stopped by SIGTERM", file=sys.stderr)
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, unwind)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
