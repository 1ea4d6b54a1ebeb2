"""timerwheel.store.batch_export through timerwheel.store.export: a version-2 store's export
writes the version-1 files, each row what the join says of its message.

Real RocksDB in tmp dirs; the stores are written by the product's version-2 writers
(`open_batch_store`'s send, fire, Ack and overrides) and the export is read back from its
SST files, as tests/store/test_export.py reads a version-1 one.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter

import pytest
from helpers.batch_v2 import open_v2

from timerwheel.common import State
from timerwheel.store import export_files, keys, records
from timerwheel.store.batch_store import new_batch
from timerwheel.store.export import ExportError, export_data_dir, export_database
from timerwheel.store.export_files import load_manifest, read_sst, verify_files
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras
from timerwheel.wheels.domain import When, WhenKind

NOW = 1_700_000_000_000
HOUR_MS = 3_600_000


def _send(store, now_ms: int, sends: list[tuple], extras=None) -> list[str]:
    """One group commit of (topic, body, deliver ms, wheel) sends; their ids."""
    topics, bodies, deliver, wheels = (list(column) for column in zip(*sends, strict=True))
    whens = [When(WhenKind.DELIVER_AT, t) for t in deliver]
    new = NewSends(topics, bodies, deliver, wheels, whens, extras)
    return store.opened.send(new, now_ms, sync=False).ids


def _commit(store, stage, *args):
    batch = new_batch()
    answer = stage(batch, *args)
    store.opened.commit(batch, sync=False)
    return answer


def _fill(store) -> list[str]:
    """Every state and wheel: FIRED (un-acked), ACKED and CANCELLED (after the fire and
    before it), SCHEDULED in each wheel and moved, client ids and properties."""
    first = _send(
        store, NOW,
        [("orders", b"o%d" % i, NOW + 100 * (i + 1), "second") for i in range(6)],
        extras={0: Extras(client_id="t/order-0", properties={"k": "v"}),
                1: Extras(properties={"trace": "abc", "n": "1"})},
    )  # fmt: skip
    _commit(store, store.opened.acker.stage_fire, NOW + 1_000, 1_000)
    acked = _commit(
        store, store.opened.acker.stage_ack, [m.encode() for m in first[2:4]], NOW + 1_200
    )
    assert acked.acked == 2
    assert _commit(store, store.opened.overrides.stage_cancel, first[4], NOW + 1_300) is State.FIRED
    later = _send(
        store, NOW + 2_000,
        [("emails", b"e" * 40, NOW + 3_500, "second"),
         ("emails", b"e" * 41, NOW + 90_000, "minute"),
         ("orders", b"x" * 7, NOW + 150_000, "minute"),
         ("audit", b"a" * 3, NOW + 3 * HOUR_MS + 5, "hour"),
         ("audit", b"a" * 4, NOW + 5 * HOUR_MS, "hour"),
         ("audit", b"", NOW + 6 * HOUR_MS, "hour")],
        extras={1: Extras(client_id="t/mail-1", properties={"to": "someone"})},
    )  # fmt: skip
    overrides = store.opened.overrides
    assert _commit(store, overrides.stage_cancel, later[4], NOW + 2_100) is State.SCHEDULED
    moved = _commit(store, overrides.stage_move, later[5], NOW + 200_000, "minute")
    assert moved is State.SCHEDULED
    return first + later


def _read_back(out_dir: str, manifest: dict, scratch: str) -> dict[str, list]:
    rows: dict[str, list] = {family: [] for family in export_files.EXPORTED_FAMILIES}
    for entry in manifest["files"]:
        rows[entry["cf"]].extend(read_sst(os.path.join(out_dir, entry["file"]), scratch))
    return rows


def _check_export(out_dir: str, reads, ids: list[str], scratch: str) -> dict:
    """Every row is what the join says of its message; the wheels hold exactly the
    SCHEDULED ones, each in its wheel; the manifest counts what was written."""
    manifest = load_manifest(out_dir)
    verify_files(out_dir, manifest)
    got = _read_back(out_dir, manifest, scratch)
    expected = {message_id: reads.get(message_id) for message_id in ids}
    decoded = {
        key.decode(): records.decode_timer(key.decode(), raw) for key, raw in got[keys.CF_MESSAGES]
    }
    assert decoded == {m: dataclasses.replace(timer, wheel="") for m, timer in expected.items()}
    wheel_rows = {
        (family, key, value) for family in export_files.WHEEL_FAMILIES for key, value in got[family]
    }
    assert wheel_rows == {
        (keys.CF_WHEEL[t.wheel], keys.wheel_key(t.deliver_at_ms, m), t.topic.encode())
        for m, t in expected.items()
        if t.state is State.SCHEDULED
    }
    families = manifest["totals"]["families"]
    assert families[keys.CF_MESSAGES]["rows"] == len(ids)
    wheels = Counter(t.wheel for t in expected.values() if t.state is State.SCHEDULED)
    for wheel, family in keys.CF_WHEEL.items():
        assert families[family]["rows"] == wheels[wheel], wheel
    assert manifest["totals"]["rows"] == len(ids) + sum(wheels.values())
    assert manifest["schema_version"] == 2  # the source's; the bytes are version 1's
    assert manifest["key_layout"]["store_schema_version"] == keys.SCHEMA_VERSION
    return {"expected": expected, "manifest": manifest}


def test_a_version_2_export_holds_the_version_1_rows_the_join_reads(tmp_path):
    with open_v2(str(tmp_path / "store"), segment_max=4) as store:
        ids = _fill(store)
        out_dir = str(tmp_path / "export")
        summary = export_database(
            store.opened.database, out_dir, max_rows_per_file=2, workers=1, now_ms=lambda: NOW
        )
        checked = _check_export(out_dir, store.opened.reads, ids, str(tmp_path))
    expected = checked["expected"]
    # The store holds every state and each wheel, so the checks above cover them.
    assert Counter(t.state for t in expected.values()) == {
        State.FIRED: 3, State.ACKED: 2, State.CANCELLED: 2, State.SCHEDULED: 5,
    }  # fmt: skip
    assert {t.wheel for t in expected.values() if t.state is State.SCHEDULED} == {
        "second", "minute", "hour",
    }  # fmt: skip
    fired = [t for t in expected.values() if t.state is State.FIRED]
    assert {t.fired_at_ms for t in fired} == {NOW + 1_000}
    assert expected["t/order-0"].properties == {"k": "v"}
    assert expected["t/mail-1"].state is State.SCHEDULED
    assert summary.timers == len(ids) and checked["manifest"]["slice_count"] > 2
    assert not [name for name in os.listdir(tmp_path) if name.startswith(".export.partial-")]


def test_a_stopped_version_2_store_exports_the_same_rows_in_parallel(tmp_path):
    data_dir = str(tmp_path / "store")
    with open_v2(data_dir, segment_max=4) as store:
        ids = _fill(store)
    out_dir = str(tmp_path / "export")
    summary = export_data_dir(
        data_dir, out_dir, max_rows_per_file=3, workers=2, parallel_min_rows=0
    )
    assert summary.timers == len(ids)
    with open_v2(data_dir, segment_max=4) as store:
        checked = _check_export(out_dir, store.opened.reads, ids, str(tmp_path))
    assert checked["manifest"]["workers"] == 2


def test_a_version_2_store_whose_meta_says_another_version_is_refused(tmp_path):
    data_dir = str(tmp_path / "store")
    with open_v2(data_dir) as store:
        _send(store, NOW, [("orders", b"o", NOW + 100, "second")])
        store.write({keys.CF_META: {keys.META_SCHEMA_VERSION: keys.encode_u64(7)}})
    with pytest.raises(ExportError, match="schema version 7"):
        export_data_dir(data_dir, str(tmp_path / "export"))
    assert not os.path.exists(tmp_path / "export")


def test_an_empty_version_2_store_exports_no_timers(tmp_path):
    with open_v2(str(tmp_path / "store")) as store:
        out_dir = str(tmp_path / "export")
        summary = export_database(store.opened.database, out_dir, workers=1)
    manifest = load_manifest(out_dir)
    assert (summary.timers, summary.rows, manifest["files"]) == (0, 0, [])
    assert manifest["schema_version"] == 2
