"""timerwheel.capacity.report on local Spark, on what it is given to read: an export read
through the data source, one partition per slice, holds every known timer; a damaged
export is refused naming its file (by the driver's checks, and past them by the worker
that reads it); an empty export makes an empty report whose drain rate is said to be
assumed; a used output folder and bad options are refused.

One Spark session and one export for the module (conftest.py).
"""

from __future__ import annotations

import shutil

import pytest

from timerwheel.capacity.report import ReportError, ReportRequest, run_report
from timerwheel.capacity.tables import ReportOptions
from timerwheel.store.export import export_data_dir
from timerwheel.store.export_files import ExportFormatError, load_manifest

pytestmark = pytest.mark.system  # a local Spark session (a JVM)


def test_data_source_through_spark_one_partition_per_slice(spark, exported):
    export_dir, truth = exported
    frame = spark.read.format("timerwheel_sst").load(export_dir)
    manifest = load_manifest(export_dir)
    slices = {e["slice"] for e in manifest["files"] if e["cf"] == "messages"}
    assert frame.rdd.getNumPartitions() == len(slices)
    rows = {r["message_id"]: r for r in frame.collect()}
    assert rows.keys() == truth.rows.keys()
    for message_id, row in rows.items():
        expected = truth.rows[message_id]
        assert (row["deliver_at_ms"], row["wheel"], row["body_bytes"]) == (
            expected.deliver_at_ms,
            expected.wheel,
            expected.body_bytes,
        )


def test_damaged_export_names_the_file(spark, exported, tmp_path):
    export_dir, _ = exported
    copy = tmp_path / "copy"
    shutil.copytree(export_dir, copy)
    manifest = load_manifest(str(copy))
    victim = next(e["file"] for e in manifest["files"] if e["cf"] == "messages")
    data = bytearray((copy / victim).read_bytes())
    for offset in range(100, len(data) // 2, 512):  # garbage in the data blocks
        data[offset] ^= 0x5A
    (copy / victim).write_bytes(bytes(data))
    with pytest.raises(ExportFormatError, match=rf"{victim}: corrupt SST, CRC-32"):
        run_report(ReportRequest(str(copy), str(tmp_path / "r1")), spark=spark)
    assert not (tmp_path / "r1").exists()
    # Past the driver's checks, the worker that reads it still names the file.
    frame = spark.read.format("timerwheel_sst").option("verify", "none").load(str(copy))
    with pytest.raises(Exception, match=rf"{victim}: (corrupt SST|cannot read SST)"):
        frame.count()


def test_empty_export_gives_an_empty_report(spark, tmp_path):
    from timerwheel.engine.engine import Engine
    from timerwheel.wheels.clock import VirtualClock
    from timerwheel.wheels.settings import Settings

    Engine(Settings(data_dir=str(tmp_path / "data")), VirtualClock(), background=False).close()
    export_data_dir(str(tmp_path / "data"), str(tmp_path / "export"))
    result = run_report(
        ReportRequest(str(tmp_path / "export"), str(tmp_path / "report")), spark=spark
    )
    assert result.summary["pending_timers"] == 0
    assert result.summary["peak_second_timers"] == 0
    # Nothing fired and no --drain-rate: the default, said to be assumed, never measured.
    assert result.summary["drain_rate_source"] == "assumed"
    assert result.summary["measured_drain_rate"] is None
    page = (tmp_path / "report" / "index.html").read_text(encoding="utf-8")
    assert "assumed: the default of --drain-rate, not measured" in page


def test_report_refuses_a_used_output_and_bad_options(exported, tmp_path, capsys):
    from timerwheel.cli.main import main

    export_dir, _ = exported
    (tmp_path / "used").mkdir()
    (tmp_path / "used" / "x").write_text("x")
    with pytest.raises(ReportError, match=r"used' exists and is not empty"):
        run_report(ReportRequest(export_dir, str(tmp_path / "used")))
    with pytest.raises(ValueError, match="drain_rate=0"):
        ReportOptions(drain_rate=0)
    assert main(["report", "--input", export_dir, "--out", "x", "--drain-rate", "0"]) == 2
    assert "drain_rate=0" in capsys.readouterr().err
    missing = str(tmp_path / "missing")
    assert main(["report", "--input", missing, "--out", str(tmp_path / "r")]) == 1
    assert f"export dir {missing!r} does not exist" in capsys.readouterr().err
