"""timerwheel.store.export_parallel: the export written by worker processes.

The same store is exported in-process (workers=1) and by two spawned workers with the
parallel threshold at 0, and the two are compared row for row; failures inside a worker
must leave nothing behind, no staging dir and no worker process.
"""

from __future__ import annotations

import os

import psutil
import pytest
from helpers.capacity_data import T0_MS, build_store, family_contents
from helpers.export_faults import crash_in_worker, disk_full_in_worker

from timerwheel.capacity.datasource import TimerwheelSstDataSource, read_partition
from timerwheel.engine.engine import Engine
from timerwheel.store import export_files, export_parallel, keys, records
from timerwheel.store.export import ExportError, export_data_dir
from timerwheel.store.export_files import load_manifest, read_sst, verify_files
from timerwheel.store.export_parallel import split_keys
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

PARALLEL = {"workers": 2, "parallel_min_rows": 0}


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("store") / "data")
    truth = build_store(data_dir)
    return data_dir, truth


def _rows(out_dir: str, scratch: str) -> dict[str, set]:
    manifest = load_manifest(out_dir)
    verify_files(out_dir, manifest)
    rows: dict[str, set] = {family: set() for family in export_files.EXPORTED_FAMILIES}
    for entry in manifest["files"]:
        items = list(read_sst(os.path.join(out_dir, entry["file"]), scratch))
        assert len(items) == entry["rows"], entry["file"]
        assert items == sorted(items)  # each SST is sorted by itself
        rows[entry["cf"]].update(items)
    return rows


def _children() -> set[int]:
    return {child.pid for child in psutil.Process().children(recursive=True)}


def _workers_left(before: set[int]) -> list[psutil.Process]:
    """Child processes started since `before` and still alive, other than
    multiprocessing's resource tracker (one per process that ever used a spawn context's
    locks; it lives as long as this process). Children that were there before (a Spark
    JVM of an earlier test module, say) are not this export's."""
    alive = []
    for child in psutil.Process().children(recursive=True):
        try:
            if child.pid not in before and not any(
                "resource_tracker" in part for part in child.cmdline()
            ):
                alive.append(child)
        except psutil.NoSuchProcess:
            pass
    return alive


@pytest.mark.system  # spawned export worker processes
def test_two_workers_write_exactly_the_rows_of_the_in_process_export(store_dir, tmp_path):
    before = _children()
    data_dir, truth = store_dir
    one, two = str(tmp_path / "one"), str(tmp_path / "two")
    export_data_dir(data_dir, one, max_rows_per_file=500, workers=1)
    seen: list[int] = []
    summary = export_data_dir(data_dir, two, max_rows_per_file=500, progress=seen.append,
                              **PARALLEL)  # fmt: skip

    expected = family_contents(data_dir)
    rows_one, rows_two = _rows(one, str(tmp_path)), _rows(two, str(tmp_path))
    assert rows_two == rows_one
    for family, items in expected.items():
        assert rows_two[family] == set(items), family
    manifest_one, manifest = load_manifest(one), load_manifest(two)
    assert manifest["workers"] == 2 and manifest_one["workers"] == 1
    for family, totals in manifest["totals"]["families"].items():  # files may differ
        assert totals["rows"] == manifest_one["totals"]["families"][family]["rows"]
        assert totals["rows"] == len(expected[family]), family
    assert summary.timers == len(truth.rows) and summary.rows == manifest["totals"]["rows"]
    assert seen[-1] == summary.rows and seen == sorted(seen)  # aggregated over the workers
    assert sorted(os.listdir(two)) == sorted([e["file"] for e in manifest["files"]]
                                             + ["manifest.json"])  # fmt: skip
    # Each range writes its own messages file for a slice: several parts in one slice.
    assert any(e["part"] > 0 for e in manifest["files"] if e["cf"] == keys.CF_MESSAGES)
    assert not _workers_left(before)


@pytest.mark.system  # spawned export worker processes
def test_parallel_slices_hold_their_key_ranges(store_dir, tmp_path):
    data_dir, _ = store_dir
    out_dir = str(tmp_path / "export")
    export_data_dir(data_dir, out_dir, max_rows_per_file=700, **PARALLEL)
    manifest = load_manifest(out_dir)
    starts = [bytes.fromhex(h) for h in manifest["slice_starts_hex"]]
    assert starts == sorted(starts) and manifest["slice_count"] == len(starts) + 1 > 1
    names = set()
    for entry in manifest["files"]:
        items = list(read_sst(os.path.join(out_dir, entry["file"]), str(tmp_path)))
        if entry["cf"] == keys.CF_MESSAGES:
            times = [records.record_deliver_at_ms(v) for _, v in items]
            wheel_keys = [keys.time_bound(t) + k for (k, _), t in zip(items, times, strict=True)]
            assert entry["file"] == f"messages-s{entry['slice']:05d}-{entry['part']:03d}.sst"
        else:
            times = [keys.key_time_ms(k) for k, _ in items]
            wheel_keys = [k for k, _ in items]
            assert entry["file"] == f"{entry['cf']}-s{entry['slice']:05d}.sst"
            assert 0 < entry["rows"] <= 700
        names.add(entry["file"])
        assert (min(times), max(times)) == (entry["min_time_ms"], entry["max_time_ms"])
        lo = starts[entry["slice"] - 1] if entry["slice"] else b""
        hi = starts[entry["slice"]] if entry["slice"] < len(starts) else None
        assert all(lo <= k and (hi is None or k < hi) for k in wheel_keys), entry["file"]
    assert len(names) == len(manifest["files"])


@pytest.mark.system  # spawned export worker processes
def test_the_report_reader_reads_a_parallel_export_as_the_known_timers(store_dir, tmp_path):
    data_dir, truth = store_dir
    out_dir = str(tmp_path / "export")
    export_data_dir(data_dir, out_dir, max_rows_per_file=400, **PARALLEL)
    reader = TimerwheelSstDataSource({"path": out_dir}).reader(None)
    got = {}
    for partition in reader.partitions():
        for batch in read_partition(partition, str(tmp_path)):
            for row in batch.to_pylist():
                got[row.pop("message_id")] = row
    assert len(got) == len(truth.rows)
    for message_id, expected in truth.rows.items():
        assert (got[message_id]["wheel"], got[message_id]["state"]) == (
            expected.wheel, expected.state,
        ), message_id  # fmt: skip


def test_small_stores_stay_in_process_by_default(store_dir, tmp_path):
    data_dir, _ = store_dir
    export_data_dir(data_dir, str(tmp_path / "export"), workers=2)  # ~6k rows < threshold
    assert load_manifest(str(tmp_path / "export"))["workers"] == 1
    with pytest.raises(ExportError, match="workers=0"):
        export_data_dir(data_dir, str(tmp_path / "other"), workers=0)
    assert sorted(os.listdir(tmp_path)) == ["export"]


@pytest.mark.system  # spawned export worker processes
def test_live_export_with_workers(tmp_path):
    before = _children()
    clock = VirtualClock(T0_MS)
    engine = Engine(Settings(data_dir=str(tmp_path / "data"), sync_writes=False), clock)
    try:
        when = When(WhenKind.DELAY, 3_600_000)
        engine.send_batch([SendSpec("live", b"x", when) for _ in range(2_000)])
        summary = engine.export(str(tmp_path / "export"), max_rows_per_file=300, **PARALLEL)
        manifest = load_manifest(summary.out_dir)
        assert summary.timers == 2_000 and manifest["workers"] == 2
        wheels = sum(manifest["totals"]["families"][f]["rows"]
                     for f in export_files.WHEEL_FAMILIES)  # fmt: skip
        assert wheels == 2_000
    finally:
        engine.close()
    assert not _workers_left(before)


# -- failures inside a worker: helpers/export_faults.py's initializers run in the spawned
# processes (WORKER_INITIALIZER), so they are importable there --
@pytest.mark.system  # spawned export worker processes
def test_full_disk_in_a_worker_leaves_nothing(store_dir, tmp_path, monkeypatch):
    before = _children()
    data_dir, _ = store_dir
    monkeypatch.setattr(export_parallel, "WORKER_INITIALIZER", disk_full_in_worker)
    with pytest.raises(ExportError, match=r"disk full while exporting to '.*out': nothing"):
        export_data_dir(data_dir, str(tmp_path / "out"), **PARALLEL)
    assert os.listdir(tmp_path) == []
    assert not _workers_left(before)


@pytest.mark.system  # spawned export worker processes
def test_an_error_in_a_worker_is_raised_and_leaves_nothing(store_dir, tmp_path, monkeypatch):
    before = _children()
    data_dir, _ = store_dir
    monkeypatch.setattr(export_parallel, "WORKER_INITIALIZER", crash_in_worker)
    with pytest.raises(RuntimeError, match="worker broke on purpose"):
        export_data_dir(data_dir, str(tmp_path / "out"), **PARALLEL)
    assert os.listdir(tmp_path) == []
    assert not _workers_left(before)


def test_split_keys_cuts_even_parts_by_the_file_estimates():
    def key(n: int) -> bytes:
        return n.to_bytes(8, "big") + b"id"

    # Two files: 1000 rows over [0, 1000), 3000 rows over [1000, 2000).
    files = [(key(0), key(999), 1_000), (key(1_000), key(1_999), 3_000)]
    splits = split_keys(files, 4)
    assert len(splits) == 3 and splits == sorted(splits)
    cut_at = [int.from_bytes(s[:8], "big") for s in splits]
    # 1000 rows a part: the first cut near the end of the first file, the others a third
    # and two thirds into the second.
    assert all(abs(c - e) <= 2 for c, e in zip(cut_at, (999, 1_333, 1_666), strict=True))
    assert split_keys([], 4) == [] and split_keys(files, 1) == []
    assert split_keys([(key(5), key(5), 10)], 4) == []  # one key cannot be cut
