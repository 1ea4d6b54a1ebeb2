"""A partition's snapshot as bytes and its pointer (cluster/snapshot.py), and the terms that
start one (cluster/settings.py SnapshotTerms): pure, no NATS."""

from __future__ import annotations

import pytest

from timerwheel.cluster import journal, snapshot
from timerwheel.cluster.settings import NodeSettings, SnapshotTerms
from timerwheel.cluster.snapshot import Pointer, SnapshotInvalid
from timerwheel.wheels.settings import SettingsError


def folded() -> journal.Fold:
    fold = journal.Fold()
    fold.apply([
        journal.Sent("a", "orders", b"\x00body", {"k": "v"}, 1_000, b""),
        journal.Sent("b", "orders", b"", {}, 2_000, b""),
        journal.Sent("c", "audit", b"c", {}, 3_000, b""),
    ])  # fmt: skip
    fold.apply([journal.Cancelled(("b",)), journal.Rescheduled("c", 4_000)])
    return fold


def pointer_of(data: bytes, through: int = 42) -> Pointer:
    name = snapshot.object_name(3, through)
    return Pointer(through, name, snapshot.digest(data), len(data), 2, 7)


def test_a_snapshot_holds_the_fold_and_reads_back_in_order():
    data = snapshot.encode(3, 42, folded())
    pointer = pointer_of(data)
    assert Pointer.decode(pointer.encode()) == pointer
    back = snapshot.decode(3, pointer, data)
    assert list(back.live) == ["a", "c"] and back.records == 0
    assert back.live["a"].body == b"\x00body" and back.live["a"].properties == {"k": "v"}
    assert back.live["c"].deliver_at_ms == 4_000


@pytest.mark.parametrize(
    "damage",
    [
        lambda data, p: (data[:-1] + b"]", p),  # one byte changed: the digest
        lambda data, p: (data + b" ", p),  # one byte more: the size
        lambda data, p: (data, pointer_of(data, through=41)),  # another sequence's object
    ],
)
def test_a_snapshot_that_does_not_match_its_pointer_is_refused(damage):
    data = snapshot.encode(3, 42, folded())
    data, pointer = damage(data, pointer_of(data))
    with pytest.raises(SnapshotInvalid):
        snapshot.decode(3, pointer, data)


def test_a_snapshot_of_another_partition_is_refused():
    data = snapshot.encode(4, 42, folded())
    with pytest.raises(SnapshotInvalid, match="header"):
        snapshot.decode(3, pointer_of(data), data)


def test_an_unreadable_pointer_is_refused():
    with pytest.raises(SnapshotInvalid, match="pointer"):
        Pointer.decode(b'{"through": 1}')


def test_snapshot_terms_are_validated_and_start_a_snapshot_at_either_bound(monkeypatch):
    terms = SnapshotTerms(records=10, bytes=4_096)
    assert not terms.due(9, 4_095) and terms.due(10, 0) and terms.due(0, 4_096)
    for bad in ({"records": 0}, {"bytes": 10}, {"retry_ms": 1}):
        with pytest.raises(SettingsError):
            SnapshotTerms(**bad)
    assert NodeSettings("n1", ("nats://x",)).snapshot == SnapshotTerms()
    monkeypatch.setenv("TIMERWHEEL_CLUSTER_SNAPSHOT_RECORDS", "50")
    assert NodeSettings("n1", ("nats://x",)).snapshot.records == 50
    monkeypatch.setenv("TIMERWHEEL_CLUSTER_SNAPSHOT_RECORDS", "lots")
    with pytest.raises(SettingsError, match="lots"):
        NodeSettings("n1", ("nats://x",))
