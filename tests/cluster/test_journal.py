"""The partition log's records and their fold (cluster/journal.py), and the engine's
RESTORE sends a takeover makes from the fold, against real RocksDB in virtual time."""

from __future__ import annotations

import pytest
from helpers.engines import T0, engine_factory

from timerwheel.cluster import journal
from timerwheel.common import State
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import IfExists, SendOptions, SendSpec, When, WhenKind


def sent(message_id: str, at_ms: int, body: bytes = b"x") -> journal.Sent:
    return journal.Sent(message_id, "orders", body, {"k": "v"}, at_ms)


def test_records_round_trip_every_entry_kind():
    options = SendOptions(max_attempts=3, dead_letter_topic="dlq")
    spec = SendSpec("orders", b"\x00\xffbody", When(WhenKind.DELAY, 5), {"a": "b"}, "id-1")
    entries = [
        journal.sent_of(spec._replace(options=options), "id-1", 1_000),
        journal.Cancelled(("id-2", "id-3")),
        journal.Acked(("id-4",)),
        journal.Rescheduled("id-5", 9_000),
    ]
    decoded = journal.decode(journal.encode(entries))
    assert decoded == entries
    restored = decoded[0].spec()
    assert restored.when == When(WhenKind.DELIVER_AT, 1_000)  # absolute, as stored
    assert restored.options == options and restored.body == b"\x00\xffbody"
    assert restored.if_exists is IfExists.RESTORE


@pytest.mark.parametrize(
    "data", [b"not json", b'{"v": 3, "e": []}', b'{"v": 1, "e": [["burn", 1]]}', b'{"v": 1}']
)
def test_an_unreadable_record_is_refused_not_skipped(data):
    with pytest.raises(journal.BadRecord):
        journal.decode(data)


def test_the_fold_keeps_what_is_live_at_its_latest_time():
    fold = journal.Fold()
    fold.apply([sent("a", 100), sent("b", 200), sent("c", 300)])
    fold.apply([journal.Cancelled(("b",)), journal.Rescheduled("c", 900)])
    fold.apply([journal.Acked(("a", "unknown")), sent("d", 400)])
    fold.apply([journal.Rescheduled("gone", 1)])
    assert list(fold.live) == ["c", "d"]
    assert fold.live["c"].deliver_at_ms == 900
    assert (fold.records, fold.entries) == (4, 8)
    # a long-overdue timer is restored inside the engine's past window: it fires at once
    assert [s.when.value for s in fold.specs(not_before_ms=500)] == [900, 500]


def test_restore_revives_a_timer_this_node_retired_and_keeps_a_live_one(tmp_path):
    """A node that gave a partition up retired its timers (cancelled or acked them); if it
    takes the partition back, the log says they are live: RESTORE stores them again,
    while a timer still live in the engine is left as it is."""
    with engine_factory(tmp_path, VirtualClock(T0)) as make:
        engine = make()
        now = engine.now_ms()
        retired = SendSpec("orders", b"r", When(WhenKind.DELIVER_AT, now + 5_000), message_id="r")
        live = SendSpec("orders", b"l", When(WhenKind.DELIVER_AT, now + 5_000), message_id="l")
        engine.send_batch([retired, live])
        assert engine.cancel("r") is State.CANCELLED
        again = [
            s._replace(if_exists=IfExists.RESTORE, when=When(WhenKind.DELIVER_AT, now + 7_000))
            for s in (retired, live)
        ]
        results = engine.send_batch(again)
        assert [r.existed for r in results] == [False, True]
        assert engine.get("r").state is State.SCHEDULED
        assert engine.get("r").deliver_at_ms == now + 7_000
        assert engine.get("l").deliver_at_ms == now + 5_000
