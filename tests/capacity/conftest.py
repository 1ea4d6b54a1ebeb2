"""Fixtures of the capacity report's tests that share a set-up
(test_capacity_report.py, test_capacity_report_input.py): a local Spark session, and a
store of known timers exported (helpers/capacity_data.py) with its ground truth. Both
are module-scoped: starting Spark takes seconds, and the tests only read the export. A
module that needs an export cut otherwise defines its own `exported`."""

from __future__ import annotations

import pytest
from helpers.capacity_data import build_and_export


@pytest.fixture(scope="module")
def spark():
    from timerwheel.capacity.spark import build_session

    session = build_session("local[2]", app_name="timerwheel-tests")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    return build_and_export(base, max_rows_per_file=600)
