"""What Stats shows of a warm standby (timerwheel.cluster.standby): the sequence its fold
has applied through and its lag behind the stream, over a fake partition log whose reads
fail, then succeed."""

from __future__ import annotations

import asyncio

from timerwheel.cluster import journal
from timerwheel.cluster.log_tail import Read
from timerwheel.cluster.standby import Standby


class FakeTail:
    def __init__(self, log: FakeLog, after: int) -> None:
        self.log, self.through = log, after

    async def read(self) -> Read:
        if self.log.failing:
            raise ConnectionError("NATS away")
        self.through = self.log.last  # nothing to fold: the sequences alone are under test
        return Read(through=self.log.last, stream_last=self.log.last)

    async def close(self) -> None:
        self.log.closed += 1


class FakeLog:
    def __init__(self) -> None:
        self.last = 0
        self.failing = False
        self.opened = 0
        self.closed = 0

    async def last_sequence(self) -> int:
        return self.last

    async def tail(self, after: int) -> FakeTail:
        self.opened += 1
        return FakeTail(self, after)


class FakeSnaps:
    partition = 4

    def __init__(self) -> None:
        self.log = FakeLog()

    async def last_pointer(self):
        return 0, None

    async def load(self):
        return journal.Fold(), None


def test_the_lag_shows_while_reads_fail_and_goes_once_the_standby_catches_up():
    async def scenario() -> tuple[list[tuple[bool, int, int]], tuple[int, int]]:
        snaps = FakeSnaps()
        standby = Standby(snaps)  # type: ignore[arg-type]
        standby._task.cancel()  # its rounds are driven here, one by one
        seen = []
        snaps.log.last = 7
        seen.append((await standby.round(), standby.through, standby.lag))
        snaps.log.last = 9
        seen.append((await standby.round(), standby.through, standby.lag))
        snaps.log.failing, snaps.log.last = True, 12
        seen.append((await standby.round(), standby.through, standby.lag))
        snaps.log.failing = False
        seen.append((await standby.round(), standby.through, standby.lag))
        return seen, (snaps.log.opened, snaps.log.closed)

    seen, (opened, closed) = asyncio.run(scenario())
    assert seen == [(True, 7, 0), (True, 9, 0), (False, 9, 3), (True, 12, 0)]
    assert (opened, closed) == (2, 1)  # one tail for two rounds; a new one after the failure
