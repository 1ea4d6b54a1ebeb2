"""While the admission gate refuses sends (the fires run late), the writer's commits take
a twentieth of `max_group_ops` (engine/writer.py, step 3): sends already admitted wait,
the fires do not wait behind one long commit of them. Manual mode, virtual time, real
RocksDB."""

from __future__ import annotations

from timerwheel.engine.engine import Engine
from timerwheel.engine.writer import LAGGING_SHARE
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import HOUR_MS, Settings

T0 = 1_700_002_800_000
GROUP = 200  # max_group_ops of the test's engine: a lagging commit takes GROUP // 20


def queued_sends(engine: Engine, calls: int, per_call: int) -> list:
    """`calls` send batches queued for the writer, not yet committed (manual mode)."""
    spec = SendSpec("orders", b"body", When(WhenKind.DELAY, HOUR_MS))
    return [engine.send_batch_async([spec] * per_call) for _ in range(calls)]


def test_a_lagging_writer_commits_a_share_of_the_queue_and_all_of_it_when_on_time(tmp_path):
    settings = Settings(data_dir=str(tmp_path / "d"), max_group_ops=GROUP)
    clock = VirtualClock(T0)
    engine = Engine(settings, clock, background=False)
    try:
        writer = engine._writer
        futures = queued_sends(engine, calls=20, per_call=10)  # 200 of weight
        assert writer.queued_weight == 200

        gate = engine.admission
        for _ in range(2):  # two late iterations in a row close the gate
            gate.observe(clock.now_ms(), settings.admit_fire_lag_ms * 10)
        assert gate.refusing
        writer.iterate()
        assert writer.queued_weight == 200 - GROUP // LAGGING_SHARE  # one call of 10
        assert sum(f.done() for f in futures) == 1

        clock.advance(settings.admit_fire_lag_ms)  # on time again, past the hold
        gate.observe(clock.now_ms(), 0)
        assert not gate.refusing
        writer.iterate()
        assert writer.queued_weight == 0  # the rest in one commit
        assert all(f.done() and len(f.result()) == 10 for f in futures)
    finally:
        engine.close()
