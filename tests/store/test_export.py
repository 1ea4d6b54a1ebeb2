"""timerwheel.store.export / timerwheel.store.export_files: the consistent cut, the SST files and
the manifest.

Real RocksDB in tmp dirs; the stores are filled by the real engine (tests/helpers/capacity_data.py).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading

import pytest
from helpers.capacity_data import T0_MS, build_store, family_contents
from helpers.export_faults import FullDiskWriter

from timerwheel.engine.engine import Engine
from timerwheel.store import export, export_files, keys, records
from timerwheel.store.export import ExportError, export_data_dir
from timerwheel.store.export_files import ExportFormatError, load_manifest, read_sst, verify_files
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings


@pytest.fixture(scope="module")
def store_dir(tmp_path_factory):
    data_dir = str(tmp_path_factory.mktemp("store") / "data")
    truth = build_store(data_dir)
    return data_dir, truth


def _read_back(out_dir: str, manifest: dict, scratch: str) -> dict[str, list]:
    rows: dict[str, list] = {family: [] for family in export_files.EXPORTED_FAMILIES}
    for entry in manifest["files"]:
        rows[entry["cf"]].extend(read_sst(os.path.join(out_dir, entry["file"]), scratch))
    return rows


def test_stopped_export_holds_exactly_the_store_split_into_small_files(store_dir, tmp_path):
    data_dir, truth = store_dir
    out_dir = str(tmp_path / "export")
    seen = []
    summary = export_data_dir(data_dir, out_dir, max_rows_per_file=500, progress=seen.append)

    manifest = load_manifest(out_dir)
    verify_files(out_dir, manifest)
    expected = family_contents(data_dir)
    got = _read_back(out_dir, manifest, str(tmp_path))
    for family, items in expected.items():
        # Messages files are per slice, so compare as sets; each file is sorted by itself.
        assert sorted(got[family]) == items, family
        assert manifest["totals"]["families"][family]["rows"] == len(items)
    assert summary.timers == len(truth.rows) == len(expected[keys.CF_MESSAGES])
    assert summary.rows == sum(len(items) for items in expected.values())
    assert summary.files == len(manifest["files"]) > 8
    assert seen[-1] == summary.rows  # the last progress report is the total
    on_disk = sorted(os.listdir(out_dir))
    assert on_disk == sorted([e["file"] for e in manifest["files"]] + ["manifest.json"])
    for entry in manifest["files"]:
        assert 0 < entry["rows"] <= 500
        assert entry["min_time_ms"] <= entry["max_time_ms"]


def test_manifest_time_ranges_and_slices_match_the_rows(store_dir, tmp_path):
    data_dir, _ = store_dir
    out_dir = str(tmp_path / "export")
    export_data_dir(data_dir, out_dir, max_rows_per_file=700)
    manifest = load_manifest(out_dir)
    starts = [bytes.fromhex(h) for h in manifest["slice_starts_hex"]]
    assert manifest["slice_count"] == len(starts) + 1 > 1
    for entry in manifest["files"]:
        items = list(read_sst(os.path.join(out_dir, entry["file"]), str(tmp_path)))
        assert len(items) == entry["rows"]
        if entry["cf"] == keys.CF_MESSAGES:
            times = [records.record_deliver_at_ms(v) for _, v in items]
            wheel_keys = [keys.time_bound(t) + k for (k, _), t in zip(items, times, strict=True)]
        else:
            times = [keys.key_time_ms(k) for k, _ in items]
            wheel_keys = [k for k, _ in items]
        assert (min(times), max(times)) == (entry["min_time_ms"], entry["max_time_ms"])
        lo = starts[entry["slice"] - 1] if entry["slice"] else b""
        hi = starts[entry["slice"]] if entry["slice"] < len(starts) else None
        assert all(lo <= k and (hi is None or k < hi) for k in wheel_keys), entry["file"]
    assert manifest["format_version"] == export_files.EXPORT_FORMAT_VERSION
    assert manifest["sst"]["format_version"] == 5
    assert set(manifest["key_layout"]["families"]) == set(export_files.EXPORTED_FAMILIES)
    assert manifest["service_now_ms"] >= T0_MS


@pytest.mark.system  # sst_dump, and spawned export workers
@pytest.mark.parametrize("workers", [1, 2])  # 2: written by spawned worker processes
def test_stock_sst_dump_reads_every_file_with_the_manifest_counts(store_dir, tmp_path, workers):
    sst_dump = shutil.which("sst_dump")
    if sst_dump is None:
        if os.environ.get("CI"):
            pytest.fail("sst_dump is missing in CI: .ci/run must install rocksdb-tools")
        pytest.skip("sst_dump not installed (apt-get install rocksdb-tools); CI installs it")
    data_dir, _ = store_dir
    out_dir = str(tmp_path / "export")
    export_data_dir(data_dir, out_dir, max_rows_per_file=1_000, workers=workers,
                    parallel_min_rows=0)  # fmt: skip
    manifest = load_manifest(out_dir)
    assert manifest["workers"] == workers
    for entry in manifest["files"]:
        path = os.path.join(out_dir, entry["file"])
        scan = subprocess.run(
            [sst_dump, f"--file={path}", "--command=scan", "--output_hex"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        rows = [line for line in scan.stdout.splitlines() if " => " in line]
        assert len(rows) == entry["rows"], entry["file"]
        props = subprocess.run(
            [sst_dump, f"--file={path}", "--show_properties"],
            capture_output=True, text=True, timeout=60, check=True,
        )  # fmt: skip
        assert f"# entries: {entry['rows']}" in props.stdout


@pytest.mark.system  # a slow run: 60k timers written during the export
def test_live_export_is_a_consistent_cut_while_writes_continue(tmp_path):
    """Batches committed after the checkpoint are not in the export, and no batch is split."""
    clock = VirtualClock(T0_MS)
    batch_size = 50
    engine = Engine(Settings(data_dir=str(tmp_path / "data"), sync_writes=False), clock)
    sent_ids: list[list[str]] = []
    stop = threading.Event()
    many_done = threading.Event()

    def batch(tag: int) -> list[SendSpec]:
        when = When(WhenKind.DELIVER_AT, T0_MS + 3_600_000 + tag)
        return [SendSpec(f"t{tag % 3}", b"body", when, message_id=f"m{tag:06d}-{i:03d}")
                for i in range(batch_size)]  # fmt: skip

    def producer() -> None:
        tag = 0
        while not stop.is_set():
            sent_ids.append([r.message_id for r in engine.send_batch(batch(tag))])
            tag += 1
            if tag == 1_200:  # 60k timers: the export then reports progress mid-way
                many_done.set()

    during: list[str] = []

    def progress(rows: int) -> None:
        if not during:  # a write that is certainly after the cut, while the export runs
            spec = SendSpec("late", b"x", When(WhenKind.DELAY, 60_000), message_id="during-1")
            during.append(engine.send(spec).message_id)

    thread = threading.Thread(target=producer, daemon=True)
    thread.start()
    try:
        assert many_done.wait(timeout=120), "the producer did not get going"
        summary = engine.export(str(tmp_path / "export"), progress=progress)
    finally:
        stop.set()
        thread.join(timeout=60)
    try:
        assert not thread.is_alive()
        assert during == ["during-1"]
        manifest = load_manifest(summary.out_dir)
        exported = {
            k.decode()
            for e in manifest["files"] if e["cf"] == keys.CF_MESSAGES
            for k, _ in read_sst(os.path.join(summary.out_dir, e["file"]), str(tmp_path))
        }  # fmt: skip
        # Batches commit in order, so the cut holds exactly the first k batches.
        k = len(exported) // batch_size
        assert len(exported) == k * batch_size and k >= 1_200
        assert exported == {i for ids in sent_ids[:k] for i in ids}
        assert len(sent_ids) > k  # the producer kept writing after the cut
        assert "during-1" not in exported
        assert engine.get("during-1").topic == "late"  # but the live store has it
        wheel_rows = sum(
            manifest["totals"]["families"][f]["rows"] for f in export_files.WHEEL_FAMILIES
        )
        assert wheel_rows == len(exported)  # every exported timer has its wheel key
    finally:
        engine.close()


def test_refuses_a_non_empty_output_and_changes_nothing(store_dir, tmp_path):
    data_dir, _ = store_dir
    out_dir = tmp_path / "export"
    out_dir.mkdir()
    (out_dir / "keep.txt").write_text("mine")
    with pytest.raises(ExportError, match=r"export'.*not empty"):
        export_data_dir(data_dir, str(out_dir))
    assert os.listdir(out_dir) == ["keep.txt"]
    assert os.listdir(tmp_path) == ["export"]  # no staging dir left behind
    empty = tmp_path / "empty"
    empty.mkdir()
    assert export_data_dir(data_dir, str(empty)).files > 0  # an empty dir is fine


def test_missing_or_foreign_data_dir_is_named(tmp_path):
    with pytest.raises(ExportError, match=r"'.*nope' does not exist"):
        export_data_dir(str(tmp_path / "nope"), str(tmp_path / "out"))
    (tmp_path / "plain").mkdir()
    with pytest.raises(ExportError, match=r"plain' is not a RocksDB database"):
        export_data_dir(str(tmp_path / "plain"), str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()
    assert not (tmp_path / "plain" / "CURRENT").exists()
    with pytest.raises(ExportError, match="max_rows_per_file=-1"):
        export.export_database(None, str(tmp_path / "out"), max_rows_per_file=-1)


def test_data_dir_of_a_running_server_says_to_use_target(store_dir, tmp_path):
    """Another process holds the store open, as a running server does."""
    data_dir, _ = store_dir
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys; from timerwheel.store.rocks import RocksDatabase\n"
         f"db = RocksDatabase({data_dir!r}); print('open', flush=True); sys.stdin.readline()\n"
         "db.close()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "open"
        with pytest.raises(ExportError, match=r"in use by a running server.*--target"):
            export_data_dir(data_dir, str(tmp_path / "out"))
        assert not (tmp_path / "out").exists()
    finally:
        holder.communicate(input="\n", timeout=60)
    assert holder.returncode == 0


def test_full_disk_is_reported_and_leaves_nothing(store_dir, tmp_path, monkeypatch):
    data_dir, _ = store_dir
    monkeypatch.setattr(export_files, "SstFileWriter", FullDiskWriter)
    with pytest.raises(ExportError, match=r"disk full while exporting to '.*out'"):
        export_data_dir(data_dir, str(tmp_path / "out"))
    assert os.listdir(tmp_path) == []


def test_full_disk_on_a_real_tiny_tmpfs(store_dir, tmp_path):
    data_dir, _ = store_dir
    mount_point = tmp_path / "tiny"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(mount_point)],
        capture_output=True, timeout=30, check=False,
    )  # fmt: skip
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        with pytest.raises(ExportError, match="disk full"):
            export_data_dir(data_dir, str(mount_point / "out"))
        assert os.listdir(mount_point) == []
    finally:
        subprocess.run(["umount", str(mount_point)], timeout=30, check=True)


def test_damaged_exports_name_the_file(store_dir, tmp_path):
    data_dir, _ = store_dir
    out_dir = tmp_path / "export"
    export_data_dir(data_dir, str(out_dir))
    manifest = load_manifest(str(out_dir))
    first = out_dir / manifest["files"][0]["file"]

    original = first.read_bytes()
    flipped = bytearray(original)
    flipped[len(flipped) // 3] ^= 0xFF
    first.write_bytes(bytes(flipped))
    with pytest.raises(ExportFormatError, match=rf"{first.name}: corrupt SST, CRC-32"):
        verify_files(str(out_dir), manifest)
    first.write_bytes(original[:-100])
    with pytest.raises(ExportFormatError, match=rf"{first.name}: corrupt SST, .* bytes"):
        verify_files(str(out_dir), manifest, checksums=False)
    with pytest.raises(ExportFormatError, match=rf"{first.name}: cannot read SST"):
        list(read_sst(str(first), str(tmp_path)))
    first.unlink()
    with pytest.raises(ExportFormatError, match=rf"{first.name}: SST file .* is missing"):
        verify_files(str(out_dir), manifest)

    manifest_path = out_dir / "manifest.json"
    manifest_path.write_text(manifest_path.read_text()[:200])
    with pytest.raises(ExportFormatError, match=r"manifest.json: corrupt manifest"):
        load_manifest(str(out_dir))
    manifest_path.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(ExportFormatError, match=r"manifest.json: not a timerwheel"):
        load_manifest(str(out_dir))
    manifest_path.unlink()
    with pytest.raises(ExportFormatError, match=r"manifest.json: missing"):
        load_manifest(str(out_dir))


def test_export_cli_from_a_stopped_data_dir(store_dir, tmp_path, capsys):
    from timerwheel.cli.main import main

    data_dir, truth = store_dir
    out_dir = str(tmp_path / "export")
    assert main(["export", "--data-dir", data_dir, "--out", out_dir]) == 0
    assert f"exported {len(truth.rows):,} timers" in capsys.readouterr().out
    assert load_manifest(out_dir)["totals"]["families"]["messages"]["rows"] == len(truth.rows)
    assert main(["export", "--data-dir", data_dir, "--out", out_dir]) == 1
    assert "is not empty" in capsys.readouterr().err


def test_export_cli_workers_flag(store_dir, tmp_path, capsys, monkeypatch):
    from timerwheel.cli.main import main

    data_dir, truth = store_dir
    asked = []
    real_export = export.export_data_dir

    def export_and_note(*args, **kwargs):
        asked.append(kwargs["workers"])
        return real_export(*args, **kwargs, parallel_min_rows=0)  # parallel even when small

    monkeypatch.setattr(export, "export_data_dir", export_and_note)
    out_dir = str(tmp_path / "export")
    assert main(["export", "--data-dir", data_dir, "--out", out_dir, "--workers", "2"]) == 0
    assert asked == [2]
    assert load_manifest(out_dir)["workers"] == 2
    assert f"exported {len(truth.rows):,} timers" in capsys.readouterr().out
    for bad, why in (
        (["--workers", "0"], "--workers=0: must be >= 1"),
        (["--workers", "2", "--target", "127.0.0.1:1"], "applies to --data-dir"),
    ):
        source = [] if "--target" in bad else ["--data-dir", data_dir]
        assert main(["export", *source, "--out", str(tmp_path / "x"), *bad]) == 2
        assert why in capsys.readouterr().err
    assert asked == [2]  # refused before any export


def test_export_cli_from_a_live_server(make_server, tmp_path, capsys):
    """--target: the running server (TimerAdmin.Export) writes the cut below its export root."""
    from timerwheel.cli.main import main
    from timerwheel.client import TimerClient
    from timerwheel.security.settings import SecuritySettings

    root = tmp_path / "exports"
    root.mkdir()
    server = make_server(security=SecuritySettings(export_root=str(root), export_reserve_bytes=0))
    with TimerClient(server.target, timeout_s=30) as client:
        for i in range(3):
            client.send("cli", b"body", delay_ms=3_600_000 + i)
    out_dir = str(root / "export")
    assert main(["export", "--target", server.target, "--out", "export"]) == 0
    assert f"to {out_dir} in" in capsys.readouterr().out
    assert load_manifest(out_dir)["totals"]["families"]["messages"]["rows"] == 3
    assert main(["export", "--target", server.target, "--out", "export"]) == 1
    assert "must be a new or empty folder" in capsys.readouterr().err
