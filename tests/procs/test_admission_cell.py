"""The admission word the engine process shares with its gRPC workers
(timerwheel.procs.admission_cell): written by one process's tick, read by another's
send handler without a call."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from timerwheel.procs.admission_cell import AdmissionPublisher, AdmissionReader, cell_path
from timerwheel.procs.remote_engine import RemoteEngine
from timerwheel.wheels.domain import AdmissionRefused


def test_a_reader_sees_what_the_engine_publishes(tmp_path):
    path = cell_path(str(tmp_path / "engine.sock"))
    reader = AdmissionReader(path, admit_ms=20)
    assert reader.refusal() is None  # no engine yet: admit
    publisher = AdmissionPublisher(path)
    try:
        assert reader.refusal() is None
        publisher.publish(True, 4_000)
        refusal = reader.refusal()
        assert refusal is not None
        assert "fire_lag_ms=4000" in refusal and "admit_fire_lag_ms=20" in refusal
        refused = reader.refused()  # what the worker raises: the engine's own refusal
        assert refused is not None and str(refused) == refusal
        assert refused.retry_after_ms == 20
        publisher.publish(False, 3)
        assert reader.refusal() is None
    finally:
        publisher.close()
        reader.close()


def test_an_engine_that_restarts_maps_the_same_word(tmp_path):
    path = cell_path(str(tmp_path / "engine.sock"))
    first = AdmissionPublisher(path)
    reader = AdmissionReader(path, admit_ms=20)
    first.publish(True, 100)
    assert reader.refusal() is not None
    first.close()  # going away: admit (sends meet UNAVAILABLE meanwhile)
    assert reader.refusal() is None
    second = AdmissionPublisher(path)
    try:
        second.publish(True, 250)
        assert "fire_lag_ms=250" in (reader.refusal() or "")
    finally:
        second.close()
        reader.close()


def test_a_worker_refuses_as_the_engine_does(tmp_path):
    """Under --workers the refusal is raised in the worker (RemoteEngine.admit_send): the
    same AdmissionRefused, so its answer carries the same retry-after (server/errors.py)."""
    path = cell_path(str(tmp_path / "engine.sock"))
    publisher = AdmissionPublisher(path)
    reader = AdmissionReader(path, admit_ms=20)
    worker_side = SimpleNamespace(_admission=reader)
    try:
        RemoteEngine.admit_send(worker_side)  # type: ignore[arg-type]  # admitted
        publisher.publish(True, 4_000)
        with pytest.raises(AdmissionRefused) as refused:
            RemoteEngine.admit_send(worker_side)  # type: ignore[arg-type]
        assert refused.value.retry_after_ms == 20
        assert "fire_lag_ms=4000" in str(refused.value)
    finally:
        publisher.close()
        reader.close()
