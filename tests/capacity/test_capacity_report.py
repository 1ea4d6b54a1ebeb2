"""timerwheel.capacity.report on local Spark: its numbers against the known timers, and its outputs.

Its tables against the truth (due per hour and minute, peak seconds against the drain
rate, configured or measured, topics, delays, wheels, states, storage and disk), its
files and its page in a real headless Chromium, and the same report read through a
`file://` URI, a pyarrow filesystem, or several nodes' exports. What it makes of a
damaged, an empty or a refused input is test_capacity_report_input.py.

One Spark session, one export and one report for the module (starting Spark takes
seconds; the session and the export are conftest.py's fixtures); every test that needs
Spark shares them.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections import Counter

import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from helpers.capacity_data import HOT_A_MS, HOT_B_MS, SENT_AT_MS, T0_MS

from timerwheel.capacity.job import DELAY_BUCKETS
from timerwheel.capacity.report import ReportError, ReportRequest, run_report
from timerwheel.capacity.tables import ReportOptions
from timerwheel.store.export import export_data_dir
from timerwheel.store.export_files import load_manifest

pytestmark = pytest.mark.system  # a local Spark session (a JVM)

MINUTE_MS = 60_000
HOUR_MS = 60 * MINUTE_MS


@pytest.fixture(scope="module")
def report(spark, exported, tmp_path_factory):
    export_dir, truth = exported
    out_dir = str(tmp_path_factory.mktemp("out") / "report")
    options = ReportOptions(drain_rate=500, top_seconds=5)
    result = run_report(ReportRequest(export_dir, out_dir, options=options), spark=spark)
    return result, truth, export_dir


def _table(result, name: str):
    return pq.read_table(os.path.join(result.out_dir, "tables", f"{name}.parquet"))


def _by(table, key: str, value: str) -> dict:
    return dict(zip(table.column(key).to_pylist(), table.column(value).to_pylist(), strict=True))


def test_due_per_hour_and_minute_match_the_truth(report):
    result, truth, _ = report
    hours = _table(result, "due_per_hour")
    assert _by(hours, "hour_start_ms", "timers") == dict(truth.per_hour())
    minutes = _table(result, "due_per_minute")
    per_minute = Counter(r.deliver_at_ms // MINUTE_MS * MINUTE_MS for r in truth.pending())
    assert _by(minutes, "minute_start_ms", "timers") == dict(per_minute)
    assert result.summary["pending_timers"] == len(truth.pending()) == 3_060


def test_peak_seconds_against_the_drain_rate(report):
    result, truth, _ = report
    peaks = _table(result, "peak_seconds").to_pylist()
    assert [(p["second_start_ms"], p["timers"]) for p in peaks[:2]] == [
        (HOT_A_MS, 700),
        (HOT_B_MS, 300),
    ]
    assert truth.per_second().most_common(2) == [(HOT_A_MS, 700), (HOT_B_MS, 300)]
    assert len(peaks) == 5
    assert [p["late"] for p in peaks[:2]] == [True, False]  # drain rate 500/s
    assert peaks[0]["drain_ms"] == 1_400 and peaks[0]["max_late_ms"] == 400
    assert peaks[1]["max_late_ms"] == 0
    assert result.summary["peak_second_ms"] == HOT_A_MS
    assert result.summary["peak_second_timers"] == 700
    assert result.summary["seconds_over_drain_rate"] == 1
    assert result.summary["timers_in_late_seconds"] == 700
    # --drain-rate 500 was given: configured, and the export's own measure is kept beside
    # it: audit.log's 20 timers, due at T0 + 2 s, fired together 3 s late at T0 + 5 s.
    assert result.summary["drain_rate_source"] == "configured"
    assert (result.summary["measured_drain_rate"], result.summary["behind_seconds"]) == (20, 1)


def test_without_a_drain_rate_the_measured_one_flags_the_seconds(spark, exported, tmp_path):
    """No --drain-rate: the rate measured in the export (20/s, the most fired in a second
    while behind) decides which seconds fire late, and the page says it was measured."""
    export_dir, truth = exported
    result = run_report(
        ReportRequest(export_dir, str(tmp_path / "r"), options=ReportOptions(top_seconds=5)),
        spark=spark,
    )
    summary = result.summary
    assert (summary["drain_rate"], summary["drain_rate_source"]) == (20, "measured")
    over = [count for count in truth.per_second().values() if count > 20]
    assert summary["seconds_over_drain_rate"] == len(over) == 2
    assert summary["timers_in_late_seconds"] == sum(over) == 1_000
    page = (tmp_path / "r" / "index.html").read_text(encoding="utf-8")
    assert "measured: the most timers fired in one second while the service was behind" in page


def test_topics_counts_and_bytes(report):
    result, truth, _ = report
    topics = _table(result, "topics").to_pylist()
    got = {t["topic"]: (t["timers"], t["body_bytes"]) for t in topics}
    expected = truth.per_topic()
    assert got == {topic: expected.get(topic, (0, 0)) for topic in got}
    assert set(got) == {row.topic for row in truth.rows.values()}
    assert got["audit.log"][0] < sum(1 for r in truth.rows.values() if r.topic == "audit.log")
    records = Counter(row.topic for row in truth.rows.values())
    assert {t["topic"]: t["records"] for t in topics} == dict(records)
    assert got["payments"][1] > 300 * 1_000  # the hot second's 1 kB bodies are in it


def test_delays_wheels_states_and_storage(report):
    result, truth, export_dir = report
    delays = _table(result, "delay_distribution")
    lowers = [lower for _, lower in DELAY_BUCKETS]
    expected = Counter(
        max(i for i, lower in enumerate(lowers) if r.deliver_at_ms - r.created_at_ms >= lower)
        for r in truth.pending()
    )
    assert delays.column("timers").to_pylist() == [expected[i] for i in range(len(lowers))]
    assert _by(_table(result, "wheel_occupancy"), "wheel", "timers") == dict(truth.per_wheel())
    assert _by(_table(result, "states"), "state", "records") == dict(truth.states())

    manifest = load_manifest(export_dir)
    summary = result.summary
    assert summary["bytes_per_timer"] == round(manifest["totals"]["bytes"] / len(truth.rows), 1)
    # Sends happened at T0 and at T0 + 5 s: the observed rate is records / 5 s.
    rate = len(truth.rows) * 1000 / (SENT_AT_MS - T0_MS)
    assert summary["send_rate_per_second"] == round(rate, 3)
    # Steady state: rate x (mean delay + retention) x bytes per timer, for two scenarios.
    projection = _table(result, "storage_projection").to_pylist()
    assert [p["scenario"] for p in projection] == ["observed send rate", "drain rate"]
    assert [p["send_rate_per_second"] for p in projection] == [round(rate, 3), 500]
    stay_s = (summary["delay_avg_ms"] + 3 * 86_400_000) / 1000
    assert summary["retention_ms"] == 3 * 86_400_000
    for row, sends in zip(projection, (rate, 500), strict=True):
        assert row["stored_timers"] == round(sends * stay_s)
        assert row["bytes"] == round(
            row["stored_timers"] * manifest["totals"]["bytes"] / len(truth.rows)
        )
    assert summary["steady_state_bytes"] == projection[0]["bytes"]
    # The disk: the export recorded the data dir's filesystem at the cut.
    disk = manifest["data_dir_disk"]
    assert 0 < disk["free_bytes"] <= disk["total_bytes"] and disk["store_bytes"] > 0
    per_timer = disk["store_bytes"] / len(truth.rows)
    assert summary["disk_growth_bytes_per_day"] == round(rate * per_timer * 86_400)
    steady = rate * stay_s * per_timer
    assert summary["disk_fills"] == (steady - disk["store_bytes"] > disk["free_bytes"])
    if summary["disk_fills"]:
        days = disk["free_bytes"] / (rate * per_timer * 86_400)
        assert summary["days_until_disk_full"] == round(days, 1)
    delays_ms = sorted(r.deliver_at_ms - r.created_at_ms for r in truth.pending())
    assert (summary["delay_min_ms"], summary["delay_max_ms"]) == (delays_ms[0], delays_ms[-1])
    for q in (50, 90, 99):  # percentiles from 2 %-wide bins: never below, at most 2 % above
        exact = delays_ms[math.ceil(q / 100 * len(delays_ms)) - 1]
        assert exact <= summary[f"delay_p{q}_ms"] <= exact * 1.02 + 1, q


def test_outputs_html_charts_csv(report):
    result, _, _ = report
    out = result.out_dir
    with open(os.path.join(out, "index.html"), encoding="utf-8") as source:
        page = source.read()
    charts = sorted(os.listdir(os.path.join(out, "charts")))
    assert len(charts) == 8
    for chart in charts:
        assert f"charts/{chart}" in page
        with open(os.path.join(out, "charts", chart), "rb") as png:
            assert png.read(8) == b"\x89PNG\r\n\x1a\n"
        assert os.path.getsize(os.path.join(out, "charts", chart)) > 5_000
    assert "Peak second" in page and "700 timers" in page
    assert "class='late'" in page  # the late second is highlighted
    for name in ("due_per_hour", "due_per_minute", "peak_seconds", "topics", "states"):
        parquet = _table(result, name)
        csv = pa_csv.read_csv(os.path.join(out, "tables", f"{name}.csv"))
        assert csv.num_rows == parquet.num_rows > 0
        assert csv.column_names == parquet.column_names
    assert os.path.exists(os.path.join(out, "summary.json"))


# Every element that pokes out of its parent's box or whose content is wider than itself,
# and a page wider than the window: what "overflows the page" means, measured by the browser.
OVERFLOW_JS = """() => {
  const bad = [];
  const page = document.documentElement;
  if (page.scrollWidth > page.clientWidth) bad.push(`page ${page.scrollWidth}px wide`);
  for (const el of document.body.querySelectorAll('*')) {
    const box = el.getBoundingClientRect();
    if (!box.width && !box.height) continue;
    const parent = el.parentElement.getBoundingClientRect();
    const what = `${el.tagName} ${(el.textContent || el.getAttribute('src') || '').slice(0, 60)}`;
    if (box.right > parent.right + 0.5 || box.left < parent.left - 0.5) bad.push(`out: ${what}`);
    if (el.clientWidth && el.scrollWidth > el.clientWidth + 1) bad.push(`wider: ${what}`);
  }
  return bad;
}"""


def test_page_in_headless_chromium_is_zoomed_to_the_load(report, tmp_path):
    """The page as a planner sees it, rendered by a real headless Chromium (Debian's
    `chromium`, driven by Playwright): every chart loads, the 48-hour charts hold the bulk
    of the timers (and exactly the known timers of their window), the per-day chart spans
    the whole horizon, tables lead with UTC text and figures read in correct English;
    nothing overflows its container at a wide or a narrow window; every key figure names
    its source, the drain rate the flag that sets it; the headline says what it assumes."""
    from playwright.sync_api import sync_playwright

    result, truth, _ = report
    chromium = shutil.which("chromium")
    assert chromium, "the Debian package chromium is needed (.ci/run installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 1000})
            page.goto(f"file://{result.out_dir}/index.html")
            images = page.evaluate("[...document.images].map(i => i.complete && i.naturalWidth)")
            figures = page.evaluate(
                "Object.fromEntries([...document.querySelectorAll('figure[data-from-ms]')]"
                ".map(f => [f.dataset.chart, [+f.dataset.fromMs, +f.dataset.untilMs,"
                " +f.dataset.timers]]))"
            )
            first_headers = page.evaluate(
                "[...document.querySelectorAll('table:not(.figures) tr:first-child')]"
                ".map(r => r.cells[0].textContent)"
            )
            cells = page.evaluate("[...document.querySelectorAll('td')].map(c => c.textContent)")
            figures_text = page.inner_text("table.figures")
            sources = page.evaluate(
                "Object.fromEntries([...document.querySelectorAll('table.figures tr')]"
                ".slice(1).map(r => [r.cells[0].textContent, r.cells[2].textContent]))"
            )
            headline = page.inner_text("p.headline")
            page.screenshot(path=str(tmp_path / "page.png"))
            overflow = {1200: page.evaluate(OVERFLOW_JS)}
            page.set_viewport_size({"width": 800, "height": 1000})
            overflow[800] = page.evaluate(OVERFLOW_JS)
        finally:
            browser.close()

    assert overflow == {1200: [], 800: []}
    assert len(sources) >= 15 and all(text.strip() for text in sources.values()), sources
    assert sources["Drain rate"].startswith("configured: --drain-rate 500; measured in the ")
    assert sources["Data dir's disk at the cut"].startswith("export manifest: the data dir")
    assert sources["Days until the disk is full"].startswith("projection: free space over")
    assert sources["Observed send rate"].startswith("export: records over the span")
    assert headline.startswith("At steady state, assuming the send rate of ")
    assert " continues, the store levels off at " in headline
    assert "free of" in headline and "if that was a burst" in headline  # 5 s of sends

    assert len(images) == 8 and all(width >= 900 for width in images), images
    due = sorted(row.deliver_at_ms for row in truth.pending())
    for chart in ("due_per_hour", "due_per_minute"):
        start, until, shown = figures[chart]
        assert start == due[0] // HOUR_MS * HOUR_MS and until - start == 48 * HOUR_MS
        in_window = sum(1 for at in due if start <= at < until)
        assert shown == in_window >= 0.75 * len(due), (chart, shown, len(due))
    start, until, shown = figures["due_per_day"]
    assert start <= due[0] and due[-1] < until and shown == len(due)
    assert until - start > 100 * 48 * HOUR_MS  # so the 48-hour charts really are a zoom
    assert first_headers[:2] == ["hour (UTC)", "minute (UTC)"]
    assert first_headers[2] == "second (UTC)"  # peak seconds
    epoch_ms = re.compile(r"^1,\d{3},\d{3},\d{3},\d{3}$")
    assert not [cell for cell in cells if epoch_ms.match(cell)]
    assert "1 second, 700 timers" in figures_text
    assert os.path.getsize(tmp_path / "page.png") > 20_000


def test_export_and_report_through_pyarrow_filesystems(spark, report, tmp_path):
    """`file://` URIs are used in place; a path on a pyarrow filesystem that is not the
    local one (a SubTreeFileSystem here, as s3:// or hdfs:// would be) is uploaded by the
    export, manifest last, and fetched file by file by the data source's tasks."""
    from pyarrow import fs as pafs

    result, truth, export_dir = report
    options = ReportOptions(drain_rate=500, top_seconds=5)
    expected = {name: _table(result, name) for name in ("due_per_hour", "topics", "states")}

    by_uri = run_report(
        ReportRequest(f"file://{export_dir}", str(tmp_path / "r-uri"), options=options),
        spark=spark,
    )
    for name, table in expected.items():
        assert _table(by_uri, name).equals(table), name

    remote = pafs.SubTreeFileSystem(str(tmp_path / "bucket"), pafs.LocalFileSystem())
    data_dir = os.path.join(os.path.dirname(export_dir), "data")
    summary = export_data_dir(data_dir, "exports/tw", max_rows_per_file=600, filesystem=remote)
    assert summary.out_dir == "exports/tw" and summary.timers == len(truth.rows)
    uploaded = tmp_path / "bucket" / "exports" / "tw"
    manifest = load_manifest(str(uploaded))
    assert sorted(os.listdir(uploaded)) == sorted(
        ["manifest.json", *(entry["file"] for entry in manifest["files"])]
    )
    with pytest.raises(Exception, match="exists and is not empty"):
        export_data_dir(data_dir, "exports/tw", filesystem=remote)

    fetched = run_report(
        ReportRequest("exports/tw", str(tmp_path / "r-fs"), options=options, filesystem=remote),
        spark=spark,
    )
    for name, table in expected.items():
        assert _table(fetched, name).equals(table), name
    assert fetched.summary["pending_timers"] == len(truth.pending())


def test_several_exports_read_as_one_report(spark, report, tmp_path):
    """A cluster's nodes' parts of one export (disjoint timers) make one report: here a
    copy of the same export stands for a second node's part, so every count doubles."""
    result, _, export_dir = report
    second = str(tmp_path / "node-2")
    shutil.copytree(export_dir, second)
    options = ReportOptions(drain_rate=500, top_seconds=5)
    request = ReportRequest(export_dir, str(tmp_path / "both"), options=options,
                            more_inputs=(second,))  # fmt: skip
    both = run_report(request, spark=spark).summary
    one = result.summary
    for key in ("pending_timers", "records", "sst_bytes", "messages_sst_bytes"):
        assert both[key] == 2 * one[key], key
    assert both["disk_free_bytes"] == 2 * one["disk_free_bytes"]  # the nodes' disks summed
    assert both["cut_at_ms"] == one["cut_at_ms"]
    assert both["export_dir"] == f"{export_dir}, {second}"

    same_twice = ReportRequest(export_dir, str(tmp_path / "twice"), more_inputs=(export_dir,))
    with pytest.raises(ReportError, match="given twice"):
        run_report(same_twice, spark=spark)
