"""The capacity report over a version-2 store's export gives the figures it gives over a
version-1 store holding the same timers (decision 0014, step 5: the export's files are
a contract independent of the store's layout).

The version-1 store is tests/helpers/capacity_data.py's (the real engine in virtual time);
the version-2 store repeats its timers through the product's version-2 writers: the same
sends at the same times, each into the wheel version 1 holds it in, the same fire, Acks
and Cancels. One local Spark session runs both reports.
"""

from __future__ import annotations

import os
from itertools import groupby

import pyarrow.parquet as pq
import pytest
from helpers.batch_v2 import open_v2
from helpers.capacity_data import build_store, family_contents, wheel_membership

from timerwheel.common import State
from timerwheel.store import keys, records
from timerwheel.store.batch_store import new_batch
from timerwheel.store.export import export_data_dir
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras

pytestmark = pytest.mark.system  # a local Spark session (a JVM)

# Figures of the summary that are not the timers': the export's and the store's bytes
# (a version-2 id is 46 hex digits, a version-1 one 32, and the layouts differ on disk),
# where and when the export and the report were made, and the service clock, which a
# version-2 store's `meta` does not keep (the report then has none, as for a new store).
LAYOUT_AND_RUN = (
    "bytes_per_timer",
    "steady_state_bytes",
    "steady_state_disk_bytes",
    "disk_bytes_per_timer",
    "disk_growth_bytes_per_day",
    "disk_fills",
    "days_until_disk_full",
    "disk_free_bytes",
    "messages_sst_bytes",
    "sst_bytes",
    "store_bytes",
    "export_dir",
    "source",
    "cut_at_ms",
    "report_seconds",
    "service_now_ms",
)
# Fire times: an ACKED message of a version-2 store has none (its `segstate` keeps only
# the Ack's time; decision 0014, the join's rule), where a version-1 record keeps it.
FIRE_FIGURES = ("measured_drain_rate", "most_fired_in_a_second")


def _timers_of(data_dir: str):
    timers = [
        records.decode_timer(key.decode(), raw)
        for key, raw in family_contents(data_dir)[keys.CF_MESSAGES]
    ]
    return sorted(timers, key=lambda t: (t.created_at_ms, t.deliver_at_ms, t.message_id))


def _commit(store, stage, *args):
    batch = new_batch()
    answer = stage(batch, *args)
    store.opened.commit(batch, sync=False)
    return answer


def _same_timers_in_version_2(v1_dir: str, v2_dir: str) -> int:
    """The version-1 store's timers written again into a new version-2 store, each
    checked there in its state and wheel; how many are ACKED."""
    timers, wheel_of = _timers_of(v1_dir), wheel_membership(v1_dir)
    v2_id: dict[str, str] = {}
    with open_v2(v2_dir) as store:
        for created_ms, group in groupby(timers, key=lambda t: t.created_at_ms):
            sent = list(group)
            wheels = [wheel_of.get(t.message_id, "hour") for t in sent]  # cancelled: any
            extras = {
                i: Extras(properties=t.properties) for i, t in enumerate(sent) if t.properties
            }
            ids = store.opened.send(
                NewSends(
                    [t.topic for t in sent], [t.body for t in sent],
                    [t.deliver_at_ms for t in sent], wheels, [t.when for t in sent], extras,
                ),
                created_ms, sync=False,
            ).ids  # fmt: skip
            v2_id.update(zip((t.message_id for t in sent), ids, strict=True))
            for fired_at_ms in sorted({t.fired_at_ms for t in sent if t.fired_at_ms}):
                _commit(store, store.opened.acker.stage_fire, fired_at_ms, 100_000)
            for t in sent:
                if t.state is State.ACKED:
                    answer = _commit(
                        store, store.opened.acker.stage_ack, [v2_id[t.message_id].encode()],
                        t.acked_at_ms,
                    )  # fmt: skip
                    assert answer.acked == 1
                elif t.state is State.CANCELLED:
                    was = _commit(
                        store, store.opened.overrides.stage_cancel, v2_id[t.message_id],
                        t.cancelled_at_ms,
                    )  # fmt: skip
                    assert was is State.SCHEDULED
        for t in timers:
            got = store.opened.reads.get(v2_id[t.message_id])
            assert (got.state, got.wheel or None) == (t.state, wheel_of.get(t.message_id))
    return sum(t.state is State.ACKED for t in timers)


def _tables(out_dir: str) -> dict[str, list[dict]]:
    folder = os.path.join(out_dir, "tables")
    return {
        name.removesuffix(".parquet"): pq.read_table(os.path.join(folder, name)).to_pylist()
        for name in sorted(os.listdir(folder))
        if name.endswith(".parquet")
    }


def test_the_report_over_a_version_2_export_gives_the_version_1_figures(tmp_path):
    from timerwheel.capacity.report import ReportRequest, run_report
    from timerwheel.capacity.spark import build_session
    from timerwheel.capacity.tables import ReportOptions

    v1_dir, v2_dir = str(tmp_path / "v1"), str(tmp_path / "v2")
    build_store(v1_dir)
    acked = _same_timers_in_version_2(v1_dir, v2_dir)
    assert acked == 5
    for name, data_dir in (("v1", v1_dir), ("v2", v2_dir)):
        export_data_dir(data_dir, str(tmp_path / f"export-{name}"), max_rows_per_file=600)
    session = build_session("local[2]", app_name="timerwheel-tests")
    try:
        options = ReportOptions(drain_rate=500, top_seconds=5)
        results = {}
        for name in ("v1", "v2"):
            export_dir, out_dir = str(tmp_path / f"export-{name}"), str(tmp_path / f"report-{name}")
            request = ReportRequest(export_dir, out_dir, options=options)
            results[name] = run_report(request, spark=session)
    finally:
        session.stop()
    tables = {name: _tables(result.out_dir) for name, result in results.items()}
    assert tables["v1"].keys() == tables["v2"].keys()
    for report_tables in tables.values():  # its bytes: as the summary's
        for row in report_tables["storage_projection"]:
            del row["bytes_per_timer"], row["bytes"]
    for name in tables["v1"]:
        assert tables["v2"][name] == tables["v1"][name], name
    summaries = {
        name: {k: v for k, v in result.summary.items() if k not in LAYOUT_AND_RUN}
        for name, result in results.items()
    }
    for figure in FIRE_FIGURES:  # every timer fired in one second, 5 of them acked
        assert summaries["v2"].pop(figure) == summaries["v1"].pop(figure) - acked, figure
    assert summaries["v2"] == summaries["v1"]
    assert summaries["v1"]["send_rate_per_second"] > 0
