"""Admission by due load, in the engine (engine/tick.py, engine/writer.py): the writer
counts the due seconds of the sends it commits, samples a CPU clock (here a virtual one
that charges each send its cost) and the gate refuses sends once the fires due ahead
plus the sends would take more than the budget. Manual mode, virtual time, real RocksDB."""

from __future__ import annotations

import pytest

from timerwheel.engine.engine import Engine
from timerwheel.wheels.admission import SAMPLE_MS
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import AdmissionRefused, SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

T0 = 1_700_002_800_000
PER_SAMPLE = 300  # sends a sample: 3,000/s
SEND_S = 250e-6  # what each costs the virtual CPU: 75% of a core


def _specs(start: int) -> list[SendSpec]:
    """Due 10..40 s ahead, spread: no fire in the test's first 10 s."""
    return [
        SendSpec("orders", b"body", When(WhenKind.DELAY, 10_000 + (i * 7_919) % 30_000))
        for i in range(start, start + PER_SAMPLE)
    ]


def test_sends_are_refused_once_the_due_load_ahead_leaves_the_fires_no_room(tmp_path):
    settings = Settings(data_dir=str(tmp_path / "d"), admit_due_load_pct=85)
    clock = VirtualClock(T0)
    engine = Engine(settings, clock, background=False)
    cpu = [0.0]
    engine._writer.tick.cpu_clock = lambda: cpu[0]
    published: list[tuple[bool, int, int]] = []
    engine.set_admission_listener(lambda *verdict: published.append(verdict))
    try:
        refused_at_ms = None
        for sample in range(80):  # 8 s
            try:
                engine.admit_send()
            except AdmissionRefused as exc:
                refused_at_ms = clock.now_ms() - T0
                refusal = exc
                break
            engine.send_batch(_specs(sample * PER_SAMPLE))
            cpu[0] += PER_SAMPLE * SEND_S
            clock.advance(SAMPLE_MS)
            engine._writer.iterate()
        # 3,000 sends/s at 250 µs: 75%; the due load ahead grows by 100 timers a second
        # every second (3,000 a second spread over 30 s), each as costly: past 85% of a
        # core after about 4 s
        assert refused_at_ms is not None and 3_000 <= refused_at_ms <= 6_000
        assert "due_load_pct=" in str(refusal) and "admit_due_load_pct=85" in str(refusal)
        assert refusal.retry_after_ms == SAMPLE_MS
        gate = engine.admission
        assert gate.due.costs.send_s == pytest.approx(SEND_S, rel=0.01)
        assert not gate.lag.refusing  # no fire was late: the due-load rule refused
        refusing, lag_ms, load_pct = published[-1]
        assert refusing and lag_ms == 0 and load_pct == gate.due.load_pct > 85
    finally:
        engine.close()


def test_without_a_cpu_clock_the_due_load_rule_admits(tmp_path):
    """Under a virtual clock and no CPU clock set, the writer samples nothing: tests in
    virtual time are not refused for the CPU the test process itself spends."""
    settings = Settings(data_dir=str(tmp_path / "d"), admit_due_load_pct=1)
    clock = VirtualClock(T0)
    engine = Engine(settings, clock, background=False)
    try:
        for sample in range(30):
            engine.send_batch(_specs(sample * PER_SAMPLE))
            clock.advance(SAMPLE_MS)
            engine._writer.iterate()
        engine.admit_send()  # not refused
        assert engine.admission.due.costs.send_s is None
    finally:
        engine.close()
