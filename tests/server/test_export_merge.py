"""A cluster's Export answer gathered from the nodes' own answers (server/export_scatter.py),
on made-up answers: one row a node in the order asked, the sums, the earliest cut."""

from __future__ import annotations

from timerwheel.server import export_scatter
from timerwheel.v1 import timerwheel_pb2 as pb


def test_one_row_a_node_and_the_sums():
    here = pb.ExportResponse(out_dir="/a/x", rows=10, files=2, timers=5, bytes=100,
                             cut_at_ms=2_000, seconds=1.5)  # fmt: skip
    there = pb.ExportResponse(out_dir="/b/x", rows=4, files=1, timers=2, bytes=40,
                              cut_at_ms=1_900, seconds=3.0)  # fmt: skip
    merged = export_scatter.merge(
        [(here, [0, 3], "n2", "h2:1"), (there, [1, 2, 4, 5], "n1", "h1:1")]
    )
    assert [(n.node, n.address, list(n.partitions)) for n in merged.nodes] == [
        ("n2", "h2:1", [0, 3]), ("n1", "h1:1", [1, 2, 4, 5]),
    ]  # fmt: skip
    assert [(n.out_dir, n.timers, n.bytes) for n in merged.nodes] == [
        ("/a/x", 5, 100), ("/b/x", 2, 40),
    ]  # fmt: skip
    assert (merged.out_dir, merged.rows, merged.files, merged.timers, merged.bytes) == (
        "/a/x", 14, 3, 7, 140,
    )  # fmt: skip
    assert merged.cut_at_ms == 1_900 and merged.seconds == 3.0


def test_a_retry_hint_names_the_folder_the_answering_nodes_filled():
    assert "'nightly'" in export_scatter.retry_hint("nightly")
    assert export_scatter.timeout_s(None) == export_scatter.ASK_BOUND_S
    assert export_scatter.timeout_s(100.0) == 75.0
