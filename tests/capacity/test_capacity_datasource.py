"""timerwheel.capacity.datasource / timerwheel.capacity.rows without Spark: the reader run
in-process.

Spark pickles the partitions and calls `read` on a worker; here the same objects are
pickled and read directly, and the rows are compared with the known timers.
"""

from __future__ import annotations

import pickle

import pytest
from helpers.capacity_data import SENT_AT_MS, build_and_export

from timerwheel.capacity.datasource import (
    ARROW_SCHEMA,
    TimerwheelSstDataSource,
    TimerwheelSstReader,
    plan_partitions,
    read_partition,
)
from timerwheel.store.export import export_data_dir
from timerwheel.store.export_files import ExportFormatError, load_manifest


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    base = tmp_path_factory.mktemp("ds")
    return build_and_export(base, max_rows_per_file=400)


def _read_all(reader: TimerwheelSstReader, scratch: str) -> list[dict]:
    rows = []
    for partition in reader.partitions():
        partition = pickle.loads(pickle.dumps(partition))  # as Spark ships it
        for batch in read_partition(partition, scratch):
            assert batch.schema == ARROW_SCHEMA
            rows.extend(batch.to_pylist())
    return rows


def test_rows_equal_the_known_timers_with_their_wheels(exported, tmp_path):
    export_dir, truth = exported
    reader = TimerwheelSstDataSource({"path": export_dir}).reader(None)
    rows = _read_all(reader, str(tmp_path))
    assert len(rows) == len(truth.rows)
    got = {row.pop("message_id"): row for row in rows}
    for message_id, expected in truth.rows.items():
        # audit.log's timers fired when the clock was moved to SENT_AT_MS; none other did
        fired = SENT_AT_MS if expected.state in ("FIRED", "ACKED") else None
        assert got[message_id].pop("fired_at_ms") == fired, message_id
        assert got[message_id] == {
            "topic": expected.topic,
            "deliver_at_ms": expected.deliver_at_ms,
            "created_at_ms": expected.created_at_ms,
            "body_bytes": expected.body_bytes,
            "state": expected.state,
            "wheel": expected.wheel,
        }, message_id
    assert {row["wheel"] for row in got.values()} == {"second", "minute", "hour", None}
    assert list(tmp_path.iterdir()) == []  # every temporary database was removed


def test_one_partition_per_slice_with_all_its_messages_files(exported):
    export_dir, _ = exported
    manifest = load_manifest(export_dir)
    partitions = plan_partitions(export_dir, manifest)
    messages: dict[int, list[str]] = {}
    for entry in manifest["files"]:
        if entry["cf"] == "messages":
            messages.setdefault(entry["slice"], []).append(entry["file"])
    assert len(partitions) == len(messages) > 1
    got = sorted(sorted(name for name, _ in p.messages) for p in partitions)
    assert got == sorted(sorted(names) for names in messages.values())
    for partition in partitions:  # each reads only the wheel files of its own slice
        slice_tag = partition.messages[0][0].rsplit("-", 2)[1].split(".")[0]
        assert partition.wheel_files
        assert all(f"-{slice_tag}" in name for name, _, _ in partition.wheel_files)
        assert all(f"-{slice_tag}" in name for name, _ in partition.messages)


def test_a_slice_of_several_messages_files_reads_its_wheel_files_once(
    exported, tmp_path, monkeypatch
):
    """A partition of k messages files and w wheel files opens w + k SST files: the
    slice's wheel keys are read once, not once per messages file."""
    import timerwheel.capacity.datasource as datasource

    export_dir, truth = exported
    manifest = load_manifest(export_dir)
    partition = plan_partitions(export_dir, manifest)[0]
    messages = [e for e in manifest["files"] if e["cf"] == "messages"]
    wheels = [e for e in manifest["files"] if e["cf"].startswith("wheel_")]
    slice_index = next(e["slice"] for e in messages if e["file"] == partition.messages[0][0])
    doubled = with_first_messages_file_repeated(partition, 2)  # the same file twice: two parts
    opened: list[str] = []
    real_read_sst = datasource.read_sst

    def counting_read_sst(path, scratch):
        opened.append(path)
        return real_read_sst(path, scratch)

    monkeypatch.setattr(datasource, "read_sst", counting_read_sst)
    rows = [row for batch in read_partition(doubled, str(tmp_path)) for row in batch.to_pylist()]
    slice_wheels = [e for e in wheels if e["slice"] == slice_index]
    assert len(opened) == len(slice_wheels) + 2
    once = sum(e["rows"] for e in messages if e["file"] == partition.messages[0][0])
    assert len(rows) == 2 * once and all(r["message_id"] in truth.rows for r in rows)


def with_first_messages_file_repeated(partition, times: int):
    """A copy of `partition` whose messages list repeats its first file `times` times."""
    copy = pickle.loads(pickle.dumps(partition))
    copy.messages = [partition.messages[0]] * times
    return copy


def test_empty_export_reads_as_no_rows(tmp_path):
    from timerwheel.engine.engine import Engine
    from timerwheel.wheels.clock import VirtualClock
    from timerwheel.wheels.settings import Settings

    Engine(Settings(data_dir=str(tmp_path / "data")), VirtualClock(), background=False).close()
    export_data_dir(str(tmp_path / "data"), str(tmp_path / "export"))
    reader = TimerwheelSstReader({"path": str(tmp_path / "export")})
    assert [p.messages for p in reader.partitions()] == [[]]
    assert list(reader.read(reader.partitions()[0])) == []


def test_bad_options_and_damaged_files_name_what_is_wrong(exported, tmp_path):
    export_dir, _ = exported
    with pytest.raises(ExportFormatError, match="needs a path"):
        TimerwheelSstReader({})
    with pytest.raises(ExportFormatError, match="verify='sometimes'"):
        TimerwheelSstReader({"path": export_dir, "verify": "sometimes"})
    with pytest.raises(ExportFormatError, match=r"manifest\.json: missing"):
        TimerwheelSstReader({"path": str(tmp_path)}).partitions()
