"""capacity.datasource / capacity.rows without Spark: the reader run in-process.

Spark pickles the partitions and calls `read` on a worker; here the same objects are
pickled and read directly, and the rows are compared with the known timers.
"""

from __future__ import annotations

import pickle

import pytest
from capacity_data import build_and_export

from capacity.datasource import (
    ARROW_SCHEMA,
    TimerwheelSstDataSource,
    TimerwheelSstReader,
    plan_partitions,
    read_partition,
)
from store.export import export_data_dir
from store.export_files import ExportFormatError, load_manifest


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


def test_one_partition_per_messages_file(exported):
    export_dir, _ = exported
    manifest = load_manifest(export_dir)
    partitions = plan_partitions(export_dir, manifest)
    messages = [e["file"] for e in manifest["files"] if e["cf"] == "messages"]
    assert len(partitions) == len(messages) > 1
    assert sorted(p.messages_path.rsplit("/", 1)[1] for p in partitions) == sorted(messages)
    for partition in partitions:  # each reads only the wheel files of its own slice
        slice_tag = partition.messages_path.rsplit("-", 2)[1]
        assert partition.wheel_files
        assert all(f"-{slice_tag}.sst" in name for name, _, _ in partition.wheel_files)


def test_empty_export_reads_as_no_rows(tmp_path):
    from engine.engine import Engine
    from wheels.clock import VirtualClock
    from wheels.settings import Settings

    Engine(Settings(data_dir=str(tmp_path / "data")), VirtualClock(), background=False).close()
    export_data_dir(str(tmp_path / "data"), str(tmp_path / "export"))
    reader = TimerwheelSstReader({"path": str(tmp_path / "export")})
    assert [p.messages_path for p in reader.partitions()] == [None]
    assert list(reader.read(reader.partitions()[0])) == []


def test_bad_options_and_damaged_files_name_what_is_wrong(exported, tmp_path):
    export_dir, _ = exported
    with pytest.raises(ExportFormatError, match="needs a path"):
        TimerwheelSstReader({})
    with pytest.raises(ExportFormatError, match="verify='sometimes'"):
        TimerwheelSstReader({"path": export_dir, "verify": "sometimes"})
    with pytest.raises(ExportFormatError, match=r"manifest\.json: missing"):
        TimerwheelSstReader({"path": str(tmp_path)}).partitions()
