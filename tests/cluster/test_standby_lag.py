"""What Stats shows of a warm standby (timerwheel.cluster.standby): the sequence its fold
has applied through and its lag behind the stream, over a fake partition log whose reads
fail, then succeed."""

from __future__ import annotations

import asyncio
import contextlib

from timerwheel.cluster import journal
from timerwheel.cluster.standby import Standby


class FakeLog:
    def __init__(self) -> None:
        self.last = 0
        self.failing = False

    async def last_sequence(self) -> int:
        return self.last

    async def read_log(self, after: int, through: int) -> list[tuple[int, bytes]]:
        if self.failing:
            raise ConnectionError("NATS away")
        return []  # nothing to fold: the sequences alone are under test


class FakeSnaps:
    partition = 4

    def __init__(self) -> None:
        self.log = FakeLog()

    async def last_pointer(self):
        return 0, None

    async def load(self):
        return journal.Fold(), None


def test_the_lag_shows_while_reads_fail_and_goes_once_the_standby_catches_up():
    async def scenario() -> list[tuple[int, int]]:
        snaps = FakeSnaps()
        standby = Standby(snaps)  # type: ignore[arg-type]
        standby.stop()  # its rounds are driven here, one by one
        seen = []
        snaps.log.last = 7
        await standby._catch_up()
        seen.append((standby.through, standby.lag))
        snaps.log.failing, snaps.log.last = True, 12
        with contextlib.suppress(ConnectionError):
            await standby._catch_up()
        seen.append((standby.through, standby.lag))
        snaps.log.failing = False
        await standby._catch_up()
        seen.append((standby.through, standby.lag))
        return seen

    assert asyncio.run(scenario()) == [(7, 0), (7, 5), (12, 0)]
