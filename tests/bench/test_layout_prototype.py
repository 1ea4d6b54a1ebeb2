"""bench/layout_prototype.py (decision 0014): both layouts, at a tiny scale, deliver every
timer exactly once, refuse a second ack and a forged id, and sweep every timer; the
batch-level layout writes fewer entries. Real RocksDB; nothing timed or counted."""

from __future__ import annotations

import pytest
from helpers.bench_runs import run_bench

pytestmark = [pytest.mark.system, pytest.mark.timeout(120)]  # system: a spawned `python -m bench.*`

# Small send calls, fire chunks and consumer window: several segments, fire chunks that
# stop inside a millisecond, fetches that stop inside a chunk.
SMALL = (
    "--timers",
    "700",
    "--body",
    "20",
    "--in-flight",
    "64",
    "--fire-chunk",
    "7",
    "--send-call",
    "300",
    "--retention-s",
    "60",
    "--no-sync",
    "--check",
)


def _both(*flags: str) -> dict[str, dict]:
    import json

    done = run_bench("layout_prototype", "both", *flags, timeout_s=100)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.strip().splitlines()]
    return {figures["layout"]: figures for figures in lines}


@pytest.mark.parametrize(
    "flags",
    [SMALL, (*SMALL, "--fire-chunk", "10000", "--in-flight", "20000", "--send-call", "10000")],
)
def test_both_layouts_deliver_every_timer_once_and_sweep_it(flags):
    results = _both(*flags)
    assert set(results) == {"per-message", "batch"}
    for figures in results.values():
        assert figures["timers"] == 700
        assert figures["delivered_once"] is True
        assert figures["reacked"] == 0
        assert figures["swept"] == 700


def test_the_batch_layout_writes_fewer_entries_in_every_phase():
    results = _both(*SMALL, "--fire-chunk", "10000")
    per_message, batch = (
        results["per-message"]["entries_a_timer"],
        results["batch"]["entries_a_timer"],
    )
    assert per_message["send"]["written"] == pytest.approx(2, abs=0.01)
    assert per_message["burst"]["read"] == pytest.approx(3, abs=0.01)
    for phase in ("send", "burst", "sweep"):
        assert batch[phase]["written"] < 0.5 * per_message[phase]["written"]
