"""The report's figures and where they come from, without Spark: the drain rate (configured,
measured or assumed, never a default passed off as measured), the disk headroom from the
export's record of the data dir's filesystem, and the page's sources and headline."""

from __future__ import annotations

import os
import re
import shutil
from html import unescape

import pytest

from timerwheel.capacity import html
from timerwheel.capacity.tables import (
    DEFAULT_DRAIN_RATE,
    ReportOptions,
    _headroom,
    resolve_drain_rate,
)
from timerwheel.engine.engine import Engine
from timerwheel.store.export import export_data_dir
from timerwheel.store.export_files import load_manifest
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.settings import DAY_MS, Settings

MEASURED = {"behind_seconds": 4, "measured_drain_rate": 7_300, "most_fired_in_a_second": 9_000}
NOTHING = {"behind_seconds": 0, "measured_drain_rate": None, "most_fired_in_a_second": 120}


# == the drain rate =========================================================================
def test_a_configured_drain_rate_wins_and_the_measured_one_is_still_said():
    drain = resolve_drain_rate(ReportOptions(drain_rate=500), MEASURED)
    assert (drain["drain_rate"], drain["drain_rate_source"]) == (500, "configured")
    assert drain["measured_drain_rate"] == 7_300
    text = html._drain_source(drain)
    assert text.startswith("configured: --drain-rate 500; measured in the export: 7,300/s")


def test_without_the_flag_the_measured_rate_is_used_with_its_basis():
    drain = resolve_drain_rate(ReportOptions(), MEASURED)
    assert (drain["drain_rate"], drain["drain_rate_source"]) == (7_300, "measured")
    text = html._drain_source(drain)
    assert text.startswith("measured: the most timers fired in one second while")
    assert "over 4 seconds" in text and "set it with --drain-rate N" in text


def test_neither_given_nor_measured_is_the_default_said_to_be_assumed():
    drain = resolve_drain_rate(ReportOptions(), NOTHING)
    assert (drain["drain_rate"], drain["drain_rate_source"]) == (DEFAULT_DRAIN_RATE, "assumed")
    text = html._drain_source(drain)
    assert text.startswith("assumed: the default of --drain-rate, not measured")
    assert "measured:" not in text.split(",")[0]
    # an export read before fire times were recorded says nothing either: assumed
    assert resolve_drain_rate(ReportOptions(), {})["drain_rate_source"] == "assumed"


# == the disk ===============================================================================
def _storage(records: int = 1_000, rate: float = 10.0, sst_bytes: int = 100_000) -> dict:
    return {
        "records": records,
        "send_rate_per_second": rate,
        "bytes_per_timer": sst_bytes / records,
        "sst_bytes": sst_bytes,
    }


def _manifest(free: int | None, total: int = 10**12, store: int | None = 200_000) -> dict:
    return {"data_dir_disk": {"free_bytes": free, "total_bytes": total, "store_bytes": store}}


def test_days_until_full_from_the_free_space_at_the_cut():
    # 200 B a record on disk (200,000 B / 1,000 records), 10 timers/s: 172.8 MB a day.
    # The steady state, 10/s x (1 d + 3 d) x 200 B = 691.2 MB, does not fit in 500 MB.
    got = _headroom(_manifest(free=500_000_000), _storage(), DAY_MS, 3 * DAY_MS)
    assert got["disk_bytes_per_timer"] == 200.0 and got["disk_bytes_per_timer_source"] == "data dir"
    assert got["disk_growth_bytes_per_day"] == 172_800_000
    assert got["steady_state_disk_bytes"] == 691_200_000
    assert got["disk_fills"] is True
    assert got["days_until_disk_full"] == round(500_000_000 / 172_800_000, 1) == 2.9


def test_a_steady_state_that_fits_never_fills_the_disk():
    got = _headroom(_manifest(free=800_000_000), _storage(), DAY_MS, 3 * DAY_MS)
    assert got["disk_fills"] is False and got["days_until_disk_full"] is None


def test_an_export_without_the_disk_says_unknown_not_a_number():
    got = _headroom({}, _storage(), DAY_MS, 3 * DAY_MS)
    assert got["disk_free_bytes"] is None and got["disk_fills"] is None
    assert got["days_until_disk_full"] is None
    # per-timer bytes then come from the export's SST files
    assert (got["disk_bytes_per_timer"], got["disk_bytes_per_timer_source"]) == (
        100.0,
        "export SST",
    )
    summary = {**_summary(), **got}
    headline = unescape(html._headline(summary))
    assert "free space is unknown" in headline and " days" not in headline
    assert "levels off at 42.8 GiB of exported SST (the store's size on disk is not" in headline


def test_the_export_records_the_data_dirs_filesystem(tmp_path):
    data = tmp_path / "data"
    Engine(Settings(data_dir=str(data)), VirtualClock(), background=False).close()
    export_data_dir(str(data), str(tmp_path / "export"))
    disk = load_manifest(str(tmp_path / "export"))["data_dir_disk"]
    usage = shutil.disk_usage(data)
    assert disk["total_bytes"] == usage.total
    assert 0 < disk["free_bytes"] <= disk["total_bytes"]
    files = sum(entry.stat().st_size for entry in os.scandir(data) if entry.is_file())
    assert 0 < disk["store_bytes"] <= 2 * files


# == the page ===============================================================================
def _summary(**changes) -> dict:
    summary = {
        "pending_timers": 3_000, "pending_body_bytes": 90_000, "records": 3_100,
        "first_due_hour_ms": 1_700_000_000_000, "last_due_hour_ms": 1_700_003_600_000,
        "peak_second_ms": 1_700_000_017_000, "peak_second_timers": 700,
        "seconds_over_drain_rate": 1, "timers_in_late_seconds": 700,
        "delay_avg_ms": DAY_MS, "retention_ms": 3 * DAY_MS,
        **{f"delay_p{q}_ms": 1_000 * q for q in (50, 90, 99)},
        "sst_bytes": 300_000, "bytes_per_timer": 96.8, "send_rate_per_second": 620.0,
        "first_created_ms": 1_700_000_000_000, "last_created_ms": 1_700_000_005_000,
        "steady_state_bytes": 46_000_000_000,
        **resolve_drain_rate(ReportOptions(), NOTHING),
        **_headroom(_manifest(free=5 * 2**30), _storage(3_100, 620.0, 300_000), DAY_MS,
                    3 * DAY_MS),
    }  # fmt: skip
    summary.update(changes)
    return summary


def test_every_key_figure_says_where_it_comes_from():
    page = html._figures(_summary())
    rows = re.findall(r"<tr><td>(.*?)</td><td>(.*?)</td><td class='source'>(.*?)</td></tr>", page)
    assert len(rows) == page.count("<tr>") - 1 >= 15  # every row but the heading
    assert all(source.strip() for _, _, source in rows)
    sources = {name: source for name, _, source in rows}
    assert sources["Drain rate"].startswith("assumed: the default of --drain-rate")
    assert sources["Data dir&#x27;s disk at the cut"].startswith("export manifest")
    values = {name: value for name, value, _ in rows}
    assert values["Days until the disk is full"].endswith(" days")


def test_the_headline_says_what_it_assumes():
    text = html._headline(_summary())
    assert "At steady state, assuming the send rate of 2023-11-14 22:13:20 UTC to " in text
    assert "(5.0 s: 620.00 timers/s) continues, the store levels off at " in text
    assert "12.9 GiB on disk (42.8 GiB of exported SST)" in text
    assert "full in " in text and " days at this rate" in text
    assert "over 5.0 s only: if that was a burst" in text  # a short window is called so
    hours = _summary(last_created_ms=1_700_000_000_000 + 6 * 3_600_000)
    assert "if that was a burst" not in html._headline(hours)
    assert "no send rate" in html._headline(_summary(send_rate_per_second=0.0))


@pytest.mark.parametrize("fills", [False, None])
def test_the_headline_never_gives_days_when_the_disk_does_not_fill(fills):
    text = html._headline(_summary(disk_fills=fills, days_until_disk_full=None))
    assert " days at this rate" not in text
