"""Engines over real RocksDB in a temp dir, driven in virtual time: what the engine's test
modules share (the instant they start at, a send spec, a wheel's size, an engine factory)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from timerwheel.engine.engine import Engine
from timerwheel.store import keys
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import MINUTE_MS, Settings

T0 = 1_700_002_800_000 - 30 * MINUTE_MS  # half an hour before an hour boundary


def delay(ms: int, topic: str = "orders", **extra) -> SendSpec:
    return SendSpec(topic, b"body", When(WhenKind.DELAY, ms), **extra)


def wheel_count(engine: Engine, wheel: str) -> int:
    return len(engine.store.scan(wheel, b"", keys.time_bound(2**63 - 1), 10**7))


@contextmanager
def engine_factory(data_dir: Path, clock: VirtualClock) -> Iterator[Callable[..., Engine]]:
    """`make(**overrides)` opens an engine on `data_dir` without a writer thread and
    without fsyncs (the tests that count syncs make their own); all are closed on exit."""
    engines: list[Engine] = []

    def make(**overrides) -> Engine:
        settings = Settings(data_dir=str(data_dir), sync_writes=False, **overrides)
        engines.append(Engine(settings, clock, background=False))
        return engines[-1]

    try:
        yield make
    finally:
        for engine in engines:
            engine.close()
