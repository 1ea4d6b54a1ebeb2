"""The rule for log records across versions (cluster/journal.py, "Versions";
docs/cluster.md, "Upgrading a cluster"): a record carries the lowest version whose
readers know all of it, so a cluster that sends no recurring series writes only records a
node of version 1 reads; a record holding a series, or a snapshot holding a series' own
send or a fired occurrence, is version 2; a reader refuses a newer version and an unknown
kind, never skips.
"""

from __future__ import annotations

import json

import pytest

from timerwheel.cluster import journal, snapshot
from timerwheel.store.extras import encode_extras
from timerwheel.wheels.domain import Repeat, SendOptions

# What a version-1 node reads and a one-shot record still is, byte for byte.
V1_RECORD = (
    b'{"v":1,"e":[["send","id-1","orders","Ym9keQ==",{"k":"v"},1000,""],'
    b'["cancel",["id-2"]],["ack",["id-3"]],["reschedule","id-4",2000]]}'
)
ONE_SHOTS = [
    journal.Sent("id-1", "orders", b"body", {"k": "v"}, 1_000),
    journal.Cancelled(("id-2",)),
    journal.Acked(("id-3",)),
    journal.Rescheduled("id-4", 2_000),
]


def series_send() -> journal.Sent:
    options = encode_extras(SendOptions(repeat=Repeat(every_ms=60_000)), 3, 5_000)
    return journal.Sent("s-1", "orders", b"tick", {}, 5_000, options)


def version(data: bytes) -> int:
    return json.loads(data.partition(b"\n")[2] or data)["v"]


def test_records_without_a_series_stay_in_the_format_a_version_1_node_reads():
    assert journal.encode(ONE_SHOTS) == V1_RECORD
    assert journal.decode(V1_RECORD) == ONE_SHOTS
    fold = journal.Fold()
    fold.apply(ONE_SHOTS)
    assert version(snapshot.encode(0, 7, fold)) == 1


def test_a_series_makes_a_record_and_a_snapshot_version_2():
    entry = journal.SeriesState("s-1", series_send(), ((2, 4_000),))
    record = journal.encode([*ONE_SHOTS, entry])
    assert version(record) == 2 and journal.decode(record)[-1] == entry
    fold = journal.Fold()
    fold.apply([entry])  # the series' own send and its fired occurrence s-1#2
    assert set(fold.live) == {"s-1", "s-1#2"}
    assert version(snapshot.encode(0, 9, fold)) == 2
    only_occurrence = journal.Fold()  # a version-1 node's send_batch refuses its id
    only_occurrence.live["s-1#2"] = fold.live["s-1#2"]
    assert version(snapshot.encode(0, 9, only_occurrence)) == 2


def test_a_version_1_record_holding_a_series_is_still_read():
    """Written by the builds that logged series before the version was raised."""
    entry = journal.SeriesState("s-1", None, ((5, 9_000),))
    record = json.loads(journal.encode([entry]))
    record["v"] = 1
    assert journal.decode(json.dumps(record).encode()) == [entry]


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b'{"v": 3, "e": []}', "log record version 3: this node reads versions 1 to 2"),
        (b'{"v": "2", "e": []}', "log record version '2'"),
        (b'{"v": 0, "e": []}', "log record version 0"),
        (b'{"v": 2, "e": [["ack", ["a"]], ["timer-v3", 1]]}', "log entry kind 'timer-v3'"),
    ],
)
def test_a_newer_version_or_an_unknown_kind_is_refused_with_what_to_do(data, said):
    with pytest.raises(journal.BadRecord, match=said) as refused:
        journal.decode(data)
    if "version" in said:
        assert "upgrade this node" in str(refused.value)
