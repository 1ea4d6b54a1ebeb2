"""The shared admission word carries the due-load rule's refusal too
(timerwheel.procs.admission_cell): a worker names the projected load and the setting,
as the engine's own gate would, or the fire lag when that rule refuses."""

from __future__ import annotations

from timerwheel.procs.admission_cell import AdmissionPublisher, AdmissionReader, cell_path
from timerwheel.wheels.admission import SAMPLE_MS, Admission


def test_a_worker_names_the_rule_that_refuses(tmp_path):
    path = cell_path(str(tmp_path / "engine.sock"))
    publisher = AdmissionPublisher(path)
    reader = AdmissionReader(path, 20, 85)
    try:
        publisher.publish(True, 7, 112)  # the due-load rule refuses; fires 7 ms late
        refused = reader.refused()
        assert refused is not None and refused.retry_after_ms == SAMPLE_MS
        assert "due_load_pct=112" in str(refused) and "admit_due_load_pct=85" in str(refused)
        publisher.publish(True, 4_000, 0)  # the fire-lag rule refuses
        refused = reader.refused()
        assert refused is not None and "fire_lag_ms=4000" in str(refused)
        publisher.publish(True, 3, 70_000)  # a load beyond the word's field: capped
        assert "due_load_pct=65535" in str(reader.refused())
        publisher.publish(False, 3, 0)
        assert reader.refused() is None
    finally:
        publisher.close()
        reader.close()


def test_the_engine_gate_and_a_worker_refuse_alike(tmp_path):
    """What the tick publishes for a due-load refusal reads back as the same error."""
    gate = Admission(20, 85)
    gate.due.refusing, gate.due.load_pct = True, 97
    path = cell_path(str(tmp_path / "engine.sock"))
    publisher = AdmissionPublisher(path)
    reader = AdmissionReader(path, 20, 85)
    try:
        publisher.publish(gate.refusing, gate.lag.lag_ms, gate.due.load_pct)
        assert str(reader.refused()) == str(gate.refused())
    finally:
        publisher.close()
        reader.close()
