"""Crash safety: SIGKILL a loaded engine during cascades and fires; nothing acknowledged is lost.

After each kill the data dir is reopened and every acknowledged timer must be present
exactly once: as a SCHEDULED record with exactly one wheel key, or as a FIRED record
with exactly one `ready` entry. At the end, every acknowledged timer fires exactly once.

The child also runs a recurring series firing every 100 ms (real time): after every kill
its occurrences so far are 1..k, each once and at its own time, and the series waits for
k+1 (no occurrence lost or doubled); at the end all of them have fired, each once.
"""

from __future__ import annotations

import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest
from helpers.crash_child import SERIES_COUNT, SERIES_EVERY_MS, SERIES_ID

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.store import keys
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, MINUTE_MS, Settings

pytestmark = pytest.mark.system  # an engine child SIGKILLed again and again

SPEED = 600  # virtual ms per real ms: a minute cascade every 100 ms of real time
BASE_MS = 1_700_002_800_000 - 10 * MINUTE_MS  # ten virtual minutes before an hour boundary
ROOT = Path(__file__).resolve().parents[2]


class AckedReader(threading.Thread):
    """Collects acknowledged ids from the child's stdout (complete lines only)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        super().__init__(daemon=True)
        self.proc = proc
        self.batches = 0
        self.acked: list[str] = []
        self.enough = threading.Event()

    def run(self) -> None:
        for line in self.proc.stdout:
            if not line.endswith("\n"):
                break  # cut off by the kill: not acknowledged
            if not line.startswith("acked "):
                continue  # log lines
            self.acked.extend(line.split()[1:])
            self.batches += 1
            if self.batches >= 5:
                self.enough.set()


def run_child_until_killed(data_dir: str, anchor_s: float, rng: random.Random) -> list[str]:
    args = [data_dir, str(BASE_MS), str(anchor_s), str(SPEED)]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.helpers.crash_child", *args],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    reader = AckedReader(proc)
    reader.start()
    try:
        assert reader.enough.wait(60), "the child acknowledged fewer than 5 batches in 60 s"
        threading.Event().wait(rng.uniform(0.2, 1.2))  # kill at a random point of the load
    finally:
        proc.kill()  # SIGKILL
        proc.wait(10)
    reader.join(10)
    return reader.acked


def presence(engine: Engine) -> tuple[Counter, Counter]:
    """How many wheel keys and ready entries each message id has."""
    in_wheels: Counter = Counter()
    for wheel in ("second", "minute", "hour"):
        for key, _ in engine.store.scan(wheel, b"", keys.time_bound(2**63 - 1), 10**7):
            in_wheels[keys.decode_timer_key(key).message_id] += 1
    in_ready = Counter(f.timer.message_id for f in engine.fetch_fired("crash", 0, 10**7))
    return in_wheels, in_ready


def check_exactly_once(data_dir: str, acked: set[str]) -> tuple[dict[State, int], int]:
    """States of the acknowledged timers, and how many occurrences the series fired."""
    engine = Engine(
        Settings(data_dir=data_dir, sync_writes=False), VirtualClock(BASE_MS), background=False
    )
    try:
        in_wheels, in_ready = presence(engine)
        states: Counter = Counter()
        for message_id in acked:
            state = engine.get(message_id).state  # NotFound here would be a lost timer
            states[state] += 1
            if state is State.SCHEDULED:
                assert (in_wheels[message_id], in_ready[message_id]) == (1, 0), message_id
            else:
                assert state is State.FIRED
                assert (in_wheels[message_id], in_ready[message_id]) == (0, 1), message_id
        assert max(in_wheels.values(), default=1) == 1 and max(in_ready.values(), default=1) == 1
        return dict(states), check_series(engine, in_wheels, in_ready)
    finally:
        engine.close()


def check_series(engine: Engine, in_wheels: Counter, in_ready: Counter) -> int:
    """Occurrences 1..k fired once each at their own times; the series waits for k+1."""
    series = engine.get(SERIES_ID)  # the child created it before its first batch
    assert series.state is State.SCHEDULED and in_wheels[SERIES_ID] == 1
    fired = series.next_occurrence - 1
    first_ms = BASE_MS + SERIES_EVERY_MS
    assert series.deliver_at_ms == first_ms + fired * SERIES_EVERY_MS
    for number in range(1, fired + 1):
        occurrence = engine.get(f"{SERIES_ID}#{number}")
        assert occurrence.state is State.FIRED and in_ready[occurrence.message_id] == 1
        assert occurrence.deliver_at_ms == first_ms + (number - 1) * SERIES_EVERY_MS
    assert not any(key.startswith(f"{SERIES_ID}#{fired + 1}") for key in in_ready)
    return fired


def test_sigkill_during_cascades_and_fires_loses_nothing_acknowledged(tmp_path):
    data_dir = str(tmp_path / "crash")
    rng = random.Random(7)
    anchor_s = time.time()
    acked: set[str] = set()
    occurrences = [0]
    for _ in range(3):
        acked.update(run_child_until_killed(data_dir, anchor_s, rng))
        states, fired = check_exactly_once(data_dir, acked)
        assert sum(states.values()) == len(acked)
        assert fired >= occurrences[-1]
        occurrences.append(fired)
    assert occurrences[-1] > 0, "the series never fired"
    assert states.get(State.FIRED, 0) > 0 and states.get(State.SCHEDULED, 0) > 0, states

    # Finally: far in the future every acknowledged timer fires, each exactly once.
    clock = VirtualClock(
        BASE_MS + DAY_MS + HOUR_MS * int((time.time() - anchor_s) * SPEED / HOUR_MS + 1)
    )
    engine = Engine(Settings(data_dir=data_dir, sync_writes=False), clock, background=False)
    try:
        engine.run_until_idle()
        fired = Counter(f.timer.message_id for f in engine.fetch_fired("crash", 0, 10**7))
        assert set(fired) >= acked
        assert max(fired.values()) == 1
        occurrences = {f"{SERIES_ID}#{n}" for n in range(1, SERIES_COUNT + 1)}
        assert {m for m in fired if m.startswith(f"{SERIES_ID}#")} == occurrences
        assert engine.get(SERIES_ID).state is State.ACKED  # done after max_count
    finally:
        engine.close()
