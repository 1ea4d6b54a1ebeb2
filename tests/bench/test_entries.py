"""bench/entries.py: the RocksDB entries a message writes and reads, per step, which
docs/performance.md's table of a message's life states. Real RocksDB, no valgrind."""

from __future__ import annotations

import pytest
from helpers.bench_runs import bench_figures

pytestmark = [pytest.mark.system, pytest.mark.timeout(300)]  # system: a spawned `python -m bench.*`


def test_a_burst_message_writes_five_entries_and_reads_three():
    figures = bench_figures("entries", "--timers", "1000", timeout_s=240)
    measured = figures["measured"]  # fires, fetches and acks: bench.instructions' part
    # The fire: wheel key out, `ready` entry in, record rewritten FIRED; the ack: record
    # rewritten ACKED, `ready` entry out. Besides, only what a group commit or an Ack
    # call writes once, whatever its messages (meta, counters, the `expiry` entry).
    assert measured["write messages put"] == pytest.approx(2, abs=0.01)
    assert measured["write ready put"] == pytest.approx(1, abs=0.01)
    assert measured["write ready delete"] == pytest.approx(1, abs=0.01)
    assert measured["write wheel_second delete"] == pytest.approx(1, abs=0.01)
    families = {what.split()[1] for what in measured if what.startswith("write ")}
    assert families <= {"messages", "ready", "wheel_second", "meta", "counts", "expiry"}
    assert measured["read wheel_second scan"] == pytest.approx(1, abs=0.01)
    assert measured["read messages"] == pytest.approx(2, abs=0.01)  # fire's and ack's
    assert measured["fired records from memory (no read)"] == pytest.approx(1, abs=0.01)


def test_each_step_is_tallied_on_its_own():
    figures = bench_figures("entries", "--steps", "--timers", "1000", timeout_s=240)
    send = figures["engine send: id, record, stage, commit, fsync"]
    assert send["write messages put"] == send["write wheel_second put"] == 1
    cascade = figures["cascade minute to second (with 25 s of ticks)"]
    assert cascade["write wheel_minute delete"] == cascade["write wheel_second put"] == 1
    assert cascade["write trace put"] == 1  # the CASCADED event
    assert figures["retention sweep"]["write messages delete"] == 1
    assert "write messages put" not in figures["fetch fired records"]
