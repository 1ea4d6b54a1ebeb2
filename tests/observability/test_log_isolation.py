"""A command run in this process leaves no logging set-up to the tests after it.

`timerwheel loadtest` sets up its process's logging at warning (stdout carries the report
only). Tests run it in-process through `main`; `capture_logs` swaps only the processors,
so the filter it left hid every info event from the store's tests that ran after
`tests/loadtest` (`store_created`, `store_upgraded`). tests/conftest.py puts structlog's
configuration back after each test. The two tests below run in file order: the first
leaves the set-up behind, the second asserts it is gone.
"""

from __future__ import annotations

import pytest
import structlog
from structlog.testing import capture_logs

from timerwheel.cli.main import main

_ran: list[str] = []


def test_the_loadtest_command_filters_its_process_logging_to_warning(monkeypatch, capsys):
    from timerwheel.loadtest import harness

    def cannot_run(*args: object, **kwargs: object) -> dict:
        raise RuntimeError("no run here")  # only the command's set-up is under test

    monkeypatch.setattr(harness, "run", cannot_run)
    code = main(["loadtest", "--scenario", "smoke", "--target", "127.0.0.1:1", "--no-progress"])
    assert code == 1 and "no run here" in capsys.readouterr().err
    with capture_logs() as logs:
        structlog.get_logger("timerwheel.test").info("below_warning")
        structlog.get_logger("timerwheel.test").warning("at_warning")
    assert [entry["event"] for entry in logs] == ["at_warning"]
    _ran.append("loadtest")


def test_the_next_test_captures_info_events_again():
    if not _ran:
        pytest.skip("needs the test above to have run before it in this session")
    with capture_logs() as logs:
        structlog.get_logger("timerwheel.test").info("store_created", data_dir="x")
    assert [entry["event"] for entry in logs] == ["store_created"]
