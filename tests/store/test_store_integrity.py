"""Which data dirs open (timerwheel.store.integrity, timerwheel.store.open_store): new, a used
store, or refused.

Real RocksDB in temp dirs. A refusal must name the data dir and what is wrong, leave the
directory exactly as it was (not a file created, removed or rewritten, not even RocksDB's
LOG or MANIFEST of a damaged store: `fingerprint` before and after), and release the LOCK
(the same process can try again and gets the same answer).
"""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest
from helpers.serve_process import TIMERWHEEL
from rocksdict import Rdict
from structlog.testing import capture_logs

from timerwheel.engine.engine import Engine
from timerwheel.store import keys
from timerwheel.store.export import ExportError, export_data_dir
from timerwheel.store.integrity import NotAStore, StoreDamaged
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import MINUTE_MS, Settings

T0 = 1_700_000_000_000


def open_engine(data_dir) -> Engine:
    settings = Settings(data_dir=str(data_dir), sync_writes=False)
    return Engine(settings, VirtualClock(T0), background=False)


def used_store(data_dir) -> None:
    """A store holding one scheduled timer, cleanly closed."""
    with open_engine(data_dir) as engine:
        engine.send(SendSpec("orders", b"b", When(WhenKind.DELAY, MINUTE_MS)))


def edit_meta(data_dir, **changes: bytes | None) -> None:
    """Put (bytes) or delete (None) meta keys of a closed store, behind the engine's back."""
    database = RocksDatabase(str(data_dir), RocksTuning(sync_writes=False))
    meta = database.families[keys.CF_META]
    for name, value in changes.items():
        key = getattr(keys, name) if name.startswith("META_") else name.encode()
        if value is None:
            del meta[key]
        else:
            meta[key] = value
    del meta
    database.close()


def fingerprint(path) -> dict[str, tuple]:
    """Every file and directory under `path`: its kind, size, modification time and the
    hash of its contents. Equal before and after: the refusal changed nothing."""
    seen: dict[str, tuple] = {}
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            full = os.path.join(root, name)
            stat = os.lstat(full)
            digest = ""
            if name in files and not os.path.islink(full):
                with open(full, "rb") as file:
                    digest = hashlib.sha256(file.read()).hexdigest()
            kind = "dir" if name in dirs else "file"
            seen[os.path.relpath(full, path)] = (kind, stat.st_size, stat.st_mtime_ns, digest)
    return seen


def created_events(logs: list[dict]) -> list[dict]:
    return [entry for entry in logs if entry["event"] == "store_created"]


# == new stores =============================================================================
def test_a_new_dir_is_created_and_logged(tmp_path):
    data_dir = tmp_path / "data"
    with capture_logs() as logs, open_engine(data_dir):
        pass
    assert [e["data_dir"] for e in created_events(logs)] == [str(data_dir)]
    assert created_events(logs)[0]["new_directory"] is True


@pytest.mark.parametrize("contents", [(), ("lost+found",)], ids=["empty", "fresh-volume"])
def test_an_empty_dir_is_a_new_store(tmp_path, contents):
    for name in contents:
        (tmp_path / name).mkdir()
    with capture_logs() as logs, open_engine(tmp_path):
        pass
    assert len(created_events(logs)) == 1


def test_reopening_a_store_is_not_a_creation_even_if_it_was_never_written(tmp_path):
    """Creation writes the whole meta at once, so an engine closed before its writer ran
    (only `counts.built` would otherwise be in meta) reopens as a used store."""
    data_dir = tmp_path / "data"
    open_engine(data_dir).close()
    with capture_logs() as logs, open_engine(data_dir):
        pass
    used_store(tmp_path / "used")
    with capture_logs() as more_logs, open_engine(tmp_path / "used"):
        pass
    assert created_events(logs) == created_events(more_logs) == []


def test_a_store_an_earlier_version_opened_but_never_wrote_is_still_new(tmp_path):
    """Before stores were created with their whole meta, an engine closed before its
    first commit left only the `counts.built` marker: that store holds no data, so it
    opens as a new store (created and logged), not as a damaged one."""
    data_dir = tmp_path / "data"
    open_engine(data_dir).close()
    database = RocksDatabase(str(data_dir), RocksTuning(sync_writes=False))
    meta_keys = list(database.families[keys.CF_META].keys())
    database.close()
    edit_meta(data_dir, **{k.decode(): None for k in meta_keys if k != keys.META_COUNTS_BUILT})
    with capture_logs() as logs, open_engine(data_dir) as engine:
        sent = engine.send(SendSpec("orders", b"b", When(WhenKind.DELAY, MINUTE_MS)))
    assert len(created_events(logs)) == 1
    with open_engine(data_dir) as engine:
        assert engine.get(sent.message_id).body == b"b"


# == damaged stores ==========================================================================
@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"META_NOW_MS": None}, "clock.now_ms missing"),
        ({"META_FIRE_SEQ": b"\x00\x01\x02"}, "fire.seq undecodable (3 bytes, expected 8)"),
        ({"META_FIRE_FROM": b"\x01"}, "fire.from undecodable"),
        ({"cascade.minute.horizon_ms": None}, "cascade.minute.horizon_ms missing"),
        ({"META_NOW_MS": None, "META_FIRE_SEQ": None}, "clock.now_ms missing; fire.seq missing"),
    ],
)
def test_a_store_with_data_and_damaged_meta_is_refused_naming_the_keys(tmp_path, changes, named):
    data_dir = tmp_path / "data"
    used_store(data_dir)
    edit_meta(data_dir, **changes)
    before = fingerprint(data_dir)
    for _ in range(2):  # refused twice: the first refusal released the LOCK
        with pytest.raises(StoreDamaged) as refused:
            open_engine(data_dir)
        message = str(refused.value)
        assert named in message and repr(str(data_dir)) in message
        assert "restore the data dir from a backup" in message and "\n" not in message
    assert fingerprint(data_dir) == before


def test_a_store_with_data_and_no_meta_at_all_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    used_store(data_dir)
    database = RocksDatabase(str(data_dir))
    meta_keys = list(database.families[keys.CF_META].keys())
    database.close()
    edit_meta(data_dir, **{key.decode(): None for key in meta_keys})
    before = fingerprint(data_dir)
    with capture_logs() as logs, pytest.raises(StoreDamaged, match="schema_version missing"):
        open_engine(data_dir)
    assert created_events(logs) == []
    assert fingerprint(data_dir) == before


@pytest.mark.system  # spawned `timerwheel serve`, one with --workers 1
@pytest.mark.parametrize("workers", ["0", "1"])
def test_serve_refused_on_a_store_with_no_meta_changes_no_byte_of_it(tmp_path, workers):
    """The real `timerwheel serve` (one process, or an engine process under the
    supervisor): exit 1, one line, and the data dir exactly as it was."""
    data_dir = tmp_path / "data"
    used_store(data_dir)
    database = RocksDatabase(str(data_dir))
    meta_keys = list(database.families[keys.CF_META].keys())
    database.close()
    edit_meta(data_dir, **{key.decode(): None for key in meta_keys})
    before = fingerprint(data_dir)
    result = subprocess.run(
        [TIMERWHEEL, "serve", "--data-dir", str(data_dir), "--host", "127.0.0.1", "--port", "0",
         "--workers", workers, "--log-format", "json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr
    assert "schema_version missing" in result.stderr
    assert fingerprint(data_dir) == before


def test_an_unknown_schema_version_is_refused(tmp_path):
    data_dir = tmp_path / "data"
    used_store(data_dir)
    edit_meta(data_dir, META_SCHEMA_VERSION=keys.encode_u64(keys.SCHEMA_VERSION + 1))
    before = fingerprint(data_dir)
    with pytest.raises(StoreDamaged, match="schema version 2, and this timerwheel reads version 1"):
        open_engine(data_dir)
    assert fingerprint(data_dir) == before


# == not a store =============================================================================
def test_a_dir_of_other_files_is_refused_and_left_untouched(tmp_path):
    (tmp_path / "notes.txt").write_bytes(b"my notes")
    (tmp_path / "photo.jpg").write_bytes(b"\xff\xd8")
    before = fingerprint(tmp_path)
    with pytest.raises(NotAStore, match=r"holds 2 entries \('notes.txt', 'photo.jpg'\)"):
        open_engine(tmp_path)
    assert fingerprint(tmp_path) == before


def test_a_file_is_refused(tmp_path):
    (tmp_path / "data").write_bytes(b"x")
    before = fingerprint(tmp_path)
    with pytest.raises(NotAStore, match="is a file, not a directory"):
        open_engine(tmp_path / "data")
    assert fingerprint(tmp_path) == before


def test_a_plain_rocksdb_is_refused_and_left_untouched(tmp_path):
    data_dir = tmp_path / "other"
    other = Rdict(str(data_dir))
    other[b"k"] = b"v"
    other.close()
    before = fingerprint(data_dir)
    with pytest.raises(NotAStore, match="a RocksDB database but not a timerwheel store") as refused:
        open_engine(data_dir)
    assert "missing messages, wheel_hour" in str(refused.value)
    assert fingerprint(data_dir) == before


# == export --data-dir opens the same way ====================================================
def test_export_refuses_a_non_store_and_a_damaged_store(tmp_path):
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "CURRENT").write_text("MANIFEST-000001\n")  # looks like RocksDB
    with pytest.raises(ExportError, match="column families cannot be read"):
        export_data_dir(str(tmp_path / "home"), str(tmp_path / "out1"))
    data_dir = tmp_path / "data"
    used_store(data_dir)
    edit_meta(data_dir, META_NOW_MS=None)
    before = fingerprint(data_dir)
    with pytest.raises(ExportError, match=r"clock\.now_ms missing"):
        export_data_dir(str(data_dir), str(tmp_path / "out2"))
    assert not (tmp_path / "out2").exists()
    assert fingerprint(data_dir) == before
