"""Wall-clock steps in the engine, in virtual time (timerwheel.engine.clock_watch, docs/engine.md
"Clock steps"): detected, logged, counted in stats; a step back fires nothing early or
twice, a step forward fires what became due at once and loses nothing."""

from __future__ import annotations

import pytest
from structlog.testing import capture_logs

from timerwheel.common import State
from timerwheel.engine.engine import Engine
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import HOUR_MS, MINUTE_MS, SECOND_MS, Settings

T0 = 1_700_002_800_000 - 30 * MINUTE_MS


@pytest.fixture
def clock():
    return VirtualClock(T0)


@pytest.fixture
def engine(tmp_path, clock):
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False)
    with Engine(settings, clock, background=False) as opened:
        opened.run_until_idle()
        yield opened


def send_at(engine: Engine, deliver_at_ms: int, topic: str = "t") -> str:
    spec = SendSpec(topic, b"b", When(WhenKind.DELIVER_AT, deliver_at_ms))
    return engine.send(spec).message_id


def fired(engine: Engine, topic: str = "t") -> list[tuple[int, str, int]]:
    """(fire seq, id, fired_at_ms) of every fired, un-acked message of `topic`."""
    return [
        (f.seq, f.timer.message_id, f.timer.fired_at_ms)
        for f in engine.fetch_fired(topic, 0, 1_000)
    ]


def clock_stats(engine: Engine) -> tuple[int, int, int, int]:
    stats = engine.stats()
    return (
        stats["clock_steps_forward"], stats["clock_steps_backward"],
        stats["last_clock_step_ms"], stats["last_clock_step_at_ms"],
    )  # fmt: skip


def test_time_passing_is_not_a_step(engine, clock):
    for _ in range(5):
        clock.advance(HOUR_MS)
        engine.run_until_idle()
    assert clock_stats(engine) == (0, 0, 0, 0)


def test_a_step_back_is_counted_and_fires_nothing_early_or_twice(engine, clock):
    early = send_at(engine, T0 + 1 * SECOND_MS)
    later = send_at(engine, T0 + 5 * SECOND_MS)
    clock.advance(2 * SECOND_MS)
    engine.run_until_idle()
    assert [m for _, m, _ in fired(engine)] == [early]
    highest_ms = clock.now_ms()

    with capture_logs() as logs:
        clock.step_wall(-10 * SECOND_MS)
        engine.run_until_idle()
    (warning,) = [e for e in logs if e["event"] == "clock_step"]
    assert warning["log_level"] == "warning" and warning["direction"] == "backward"
    assert warning["size_ms"] == -10 * SECOND_MS
    assert (warning["wall_before_ms"], warning["wall_after_ms"]) == (highest_ms, T0 - 8_000)
    assert clock_stats(engine) == (0, 1, -10 * SECOND_MS, T0 - 8 * SECOND_MS)

    # Time stands still at the highest time seen until the wall clock is back past it.
    monotonic_at_step = clock.monotonic_ms()
    for _ in range(12):  # to T0 + 4 s: 12 s of real time, the wall still before `later`
        clock.advance(SECOND_MS)
        engine.run_until_idle()
        assert engine.scheduler.now_ms == max(highest_ms, clock.now_ms())
        assert [m for _, m, _ in fired(engine)] == [early]
    clock.advance(SECOND_MS)  # the wall clock reaches `later`'s deliver time
    engine.run_until_idle()
    rows = fired(engine)
    assert [m for _, m, _ in rows] == [early, later]  # each once, in fire order
    assert rows[1][2] == T0 + 5 * SECOND_MS  # on time by the wall clock...
    # ... and late in real time by the step: 3 s were left, 13 s passed.
    assert clock.monotonic_ms() - monotonic_at_step == 3 * SECOND_MS + 10 * SECOND_MS
    assert engine.stats()["fire_seq"] == 2 and engine.get(later).state is State.FIRED
    assert clock_stats(engine)[:2] == (0, 1)  # catching up is not another step


def test_a_send_during_a_step_back_counts_its_delay_from_the_highest_time_seen(engine, clock):
    clock.advance(2 * SECOND_MS)
    engine.run_until_idle()
    clock.step_wall(-10 * SECOND_MS)
    engine.run_until_idle()
    result = engine.send(SendSpec("t", b"b", When(WhenKind.DELAY, SECOND_MS)))
    assert result.deliver_at_ms == T0 + 3 * SECOND_MS


def test_a_step_forward_fires_what_became_due_at_once_and_loses_nothing(engine, clock):
    due = [send_at(engine, T0 + ms) for ms in (10 * SECOND_MS, 30 * MINUTE_MS, 59 * MINUTE_MS)]
    not_yet = send_at(engine, T0 + 2 * HOUR_MS)
    with capture_logs() as logs:
        clock.step_wall(HOUR_MS)
        engine.run_until_idle()
    (warning,) = [e for e in logs if e["event"] == "clock_step"]
    assert warning["direction"] == "forward" and warning["size_ms"] == HOUR_MS
    assert clock_stats(engine) == (1, 0, HOUR_MS, T0 + HOUR_MS)
    rows = fired(engine)
    assert sorted(m for _, m, _ in rows) == sorted(due)
    for _, message_id, fired_at_ms in rows:  # at the new time: never before deliver time
        assert fired_at_ms == T0 + HOUR_MS >= engine.get(message_id).deliver_at_ms
    assert engine.get(not_yet).state is State.SCHEDULED
    clock.advance(HOUR_MS)
    engine.run_until_idle()
    assert engine.get(not_yet).state is State.FIRED and len(fired(engine)) == 4
    assert clock_stats(engine)[:2] == (1, 0)


def test_opening_behind_the_stores_time_is_logged_and_fires_nothing_early(tmp_path, clock):
    """The clock set back while the server was down: `meta` keeps the highest time seen."""
    settings = Settings(data_dir=str(tmp_path / "data"), sync_writes=False)
    with Engine(settings, clock, background=False) as engine:
        clock.advance(MINUTE_MS)
        engine.run_until_idle()
        later = send_at(engine, T0 + MINUTE_MS + 5 * SECOND_MS)
    behind = VirtualClock(T0)
    with capture_logs() as logs, Engine(settings, behind, background=False) as engine:
        engine.run_until_idle()
        behind.advance(MINUTE_MS)  # back at the store's time: still 5 s to go
        engine.run_until_idle()
        assert engine.get(later).state is State.SCHEDULED
        behind.advance(5 * SECOND_MS)
        engine.run_until_idle()
        assert engine.get(later).state is State.FIRED
        assert engine.stats()["clock_steps_backward"] == 0  # a reading at open is no step
    (warning,) = [e for e in logs if e["event"] == "clock_behind_store"]
    assert warning["behind_ms"] == MINUTE_MS and warning["log_level"] == "warning"
