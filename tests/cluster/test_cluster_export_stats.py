"""Export and Stats of a real three-node cluster on a real JetStream cluster: an Export
asked of one node is written by every node for its own partitions, below its own export
root, and gathered into one answer whose rows cover every partition once with the counts
sent (server/export_scatter.py); Stats shows each partition's warm standby catching up
with its stream and the owner's latest snapshot moving on as the log grows
(cluster/standby.py, cluster/replication.py)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import grpc
import pytest
from helpers.cluster_nodes import ClusterRun

from timerwheel.client import TimerClient
from timerwheel.cluster.partitions import partition_of
from timerwheel.store.export_files import MANIFEST_NAME
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

pytestmark = [pytest.mark.system, pytest.mark.timeout(240)]

TIMERWHEEL = str(Path(sys.executable).parent / "timerwheel")


def ids_for(partitions: int, prefix: str, per_partition: dict[int, int]) -> list[str]:
    """Client ids, `per_partition[p]` of them in each partition p."""
    found: dict[int, list[str]] = {p: [] for p in per_partition}
    n = 0
    while any(len(found[p]) < want for p, want in per_partition.items()):
        n += 1
        message_id = f"{prefix}-{n}"
        partition = partition_of(message_id, partitions)
        if partition in found and len(found[partition]) < per_partition[partition]:
            found[partition].append(message_id)
    return [message_id for ids in found.values() for message_id in ids]


def export(target: str, out_dir: str) -> pb.ExportResponse:
    with grpc.insecure_channel(target) as channel:
        admin = pb_grpc.TimerAdminStub(channel)
        return admin.Export(pb.ExportRequest(out_dir=out_dir), timeout=120)


def test_an_export_asked_of_one_node_gathers_every_nodes_partitions(tmp_path):
    roots = {f"n{i}": tmp_path / f"exports-n{i}" for i in (1, 2, 3)}
    for root in roots.values():
        root.mkdir()
    with ClusterRun(tmp_path, node_flags=lambda name: ["--export-root", str(roots[name])]) as run:
        owned = run.wait_all_owned()
        assert all(owned.values()), f"every node owns partitions: {owned}"
        # a different number of timers in each partition, so a row's counts name its partitions
        sent = ids_for(run.partitions, "order", {p: 2 + p for p in range(run.partitions)})
        with TimerClient(run.servers["n1"].target, timeout_s=10) as client:
            for message_id in sent:
                client.send("orders", b"o", delay_ms="1h", message_id=message_id)
        by_partition = Counter(partition_of(m, run.partitions) for m in sent)

        # asked of n2: every node answers for its own partitions
        answer = export(run.servers["n2"].target, "nightly")

        assert answer.nodes[0].node == "n2", "the node asked first"
        assert sorted(row.node for row in answer.nodes) == ["n1", "n2", "n3"]
        covered = [p for row in answer.nodes for p in row.partitions]
        assert sorted(covered) == list(range(run.partitions)), "every partition exactly once"
        for row in answer.nodes:
            assert row.partitions == owned[row.node], row
            assert row.timers == sum(by_partition[p] for p in row.partitions), row
            assert row.address == run.servers[row.node].target
            # written on "its machine": below its own export root, with its own manifest
            out = roots[row.node] / "nightly"
            assert Path(row.out_dir) == out.resolve()
            manifest = json.loads((out / MANIFEST_NAME).read_text())
            assert manifest["totals"]["families"]["messages"]["rows"] == row.timers
            assert manifest["totals"]["files"] == row.files and row.files > 0
            assert manifest["totals"]["rows"] == row.rows
            assert manifest["totals"]["bytes"] == row.bytes
        assert answer.timers == len(sent)
        assert answer.rows == sum(row.rows for row in answer.nodes)
        assert answer.files == sum(row.files for row in answer.nodes)
        assert answer.cut_at_ms == min(row.cut_at_ms for row in answer.nodes)

        # the same folder again: refused (the asked node's own is not empty), with the hint
        with pytest.raises(grpc.RpcError) as again:
            export(run.servers["n3"].target, "nightly")
        assert again.value.code() is grpc.StatusCode.INVALID_ARGUMENT

        # the command line prints one line a node
        shown = subprocess.run(
            [TIMERWHEEL, "export", "--target", run.servers["n1"].target, "--out", "weekly"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        for name in ("n1", "n2", "n3"):
            line = next(x for x in shown.stdout.splitlines() if f"node {name} at" in x)
            parts = ",".join(map(str, owned[name]))
            timers = sum(by_partition[p] for p in owned[name])
            assert f"partitions {parts}, {timers:,} timers" in line, line
            assert (roots[name] / "weekly" / MANIFEST_NAME).exists()


def rows_of(target: str) -> dict[int, pb.ClusterPartition]:
    with TimerClient(target, timeout_s=10) as client:
        return {row.partition: row for row in client.stats().cluster.map}


def wait_for(condition, what: str, bound_s: float = 60):
    deadline = time.monotonic() + bound_s
    while True:
        found = condition()
        if found:
            return found
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


def test_stats_show_the_standbys_catching_up_and_the_snapshots_moving_on(
    tmp_path, monkeypatch
):  # fmt: skip
    monkeypatch.setenv("TIMERWHEEL_CLUSTER_SNAPSHOT_RECORDS", "8")  # the nodes read it at start
    with ClusterRun(tmp_path) as run:
        owned = run.wait_all_owned()
        owner = next(name for name, parts in owned.items() if parts)
        partition = owned[owner][0]
        targets = {name: server.target for name, server in run.servers.items()}

        def standby_row() -> tuple[str, pb.ClusterPartition] | None:
            """The node that is the partition's standby, and its row for it."""
            for name, target in targets.items():
                row = rows_of(target)[partition]
                if name != owner and row.verdict == "standby" and row.standby_sequence:
                    return name, row
            return None

        def send(prefix: str, count: int) -> int:
            """`count` sends to the partition, one log record each; the owner's last
            stream sequence after them."""
            ids = ids_for(run.partitions, prefix, {partition: count})
            with TimerClient(targets[owner], timeout_s=10) as client:
                for message_id in ids:
                    client.send("orders", b"o", delay_ms="1h", message_id=message_id)
            return rows_of(targets[owner])[partition].last_sequence

        last = send("first", 3)  # below the snapshot terms: no snapshot yet
        standby, row = wait_for(
            lambda: (found := standby_row()) and found[1].standby_sequence >= last and found,
            "a standby folded the partition's log through the owner's last record",
        )
        assert row.standby_lag == 0
        assert rows_of(targets[owner])[partition].snapshot_sequence == 0
        # other nodes' rows carry no snapshot; the owner's row no standby of its own
        assert rows_of(targets[owner])[partition].standby_sequence == 0

        last = send("second", 10)  # past 8 records: the owner snapshots the partition
        first = wait_for(
            lambda: rows_of(targets[owner])[partition].snapshot_sequence,
            "the owner's row shows the partition's snapshot (read every 5 s)",
        )
        assert 0 < first <= last
        mine = rows_of(targets[owner])[partition]
        assert 0 <= mine.snapshot_age_ms < 60_000, mine
        assert rows_of(targets[standby])[partition].snapshot_sequence == 0, "owner's row only"
        row = wait_for(
            lambda: (r := rows_of(targets[standby])[partition]).standby_sequence >= last and r,
            "the standby moved on with the stream",
        )
        assert row.standby_lag == 0 and row.standby_sequence > 0

        last = send("third", 10)  # another snapshot, through a later sequence
        later = wait_for(
            lambda: (s := rows_of(targets[owner])[partition].snapshot_sequence) > first and s,
            "a later snapshot shows",
        )
        assert later <= last

        shown = subprocess.run(
            [TIMERWHEEL, "stats", "--target", targets[standby]],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        line = next(x for x in shown.stdout.splitlines() if x.startswith("standby of"))
        assert f"p{partition} through " in line
        shown = subprocess.run(
            [TIMERWHEEL, "stats", "--target", targets[owner]],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        line = next(x for x in shown.stdout.splitlines() if x.startswith("snapshots"))
        assert f"p{partition} through " in line
