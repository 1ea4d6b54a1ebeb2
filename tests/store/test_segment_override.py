"""The version-2 Cancel and move (timerwheel.store.segment_override) in a real version-2
store: one `overrides` entry a message, the pending counters, the fire chunk a FIRED
message leaves, the new pair a move places (and the firer is told of), and what is
refused."""

from __future__ import annotations

import pytest
from helpers.batch_v2 import commit, fire, open_v2

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import new_batch
from timerwheel.store.keys import CF_WHEEL
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras

NOW = 1_200_000


def send(store, deliver: list[int], topic: str = "orders", extras=None) -> list[str]:
    n = len(deliver)
    sends = NewSends([topic] * n, [b"b"] * n, deliver, ["second"] * n, extras=extras)
    return store.opened.send(sends, NOW, sync=False).ids


def override(store, message_id: str) -> be.Override | None:
    parsed = parse_id(message_id)
    raw = store.families[bk.CF_OVERRIDES].get(bk.place_key(parsed.segment, parsed.message_index))
    return None if raw is None else be.decode_override(raw)


def test_a_cancel_of_a_scheduled_message_leaves_its_counter_and_is_passed_over(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100, NOW + 200])
        overrides, counts = store.opened.overrides, store.opened.counts
        assert counts.total("orders") == 2
        assert commit(store, overrides.stage_cancel, ids[0], NOW + 10) is State.SCHEDULED
        assert override(store, ids[0]) == be.Override(cancelled_at_ms=NOW + 10)
        assert counts.total("orders") == 1
        assert commit(store, overrides.stage_cancel, ids[0], NOW + 20) is None  # terminal
        assert override(store, ids[0]) == be.Override(cancelled_at_ms=NOW + 10)
        fired = fire(store, NOW + 300)
        assert [c.indexes for c in fired.chunks] == [[parse_id(ids[1]).message_index]]
        assert counts.total("orders") == 0


def test_a_cancel_of_a_fired_message_retires_it_from_its_chunk(tmp_path):
    with open_v2(str(tmp_path / "s"), retention_ms=1_000) as store:
        ids = send(store, [NOW + 100, NOW + 200])
        (chunk,) = fire(store, NOW + 300).chunks
        overrides = store.opened.overrides
        assert commit(store, overrides.stage_cancel, ids[0], NOW + 400) is State.FIRED
        assert list(dict(store.families[bk.CF_READY].items())) == [chunk.key]
        assert commit(store, overrides.stage_cancel, ids[1], NOW + 500) is State.FIRED
        assert dict(store.families[bk.CF_READY].items()) == {}  # with its last message
        seq = parse_id(ids[0]).segment
        states, times = be.decode_segstate(store.families[bk.CF_SEGSTATE][bk.segment_key(seq)])
        assert (bytes(states), list(times)) == (
            bytes([State.CANCELLED] * 2),
            [NOW + 400, NOW + 500],
        )
        assert list(store.families[bk.CF_EXPIRY].keys()) == [bk.expiry_key(NOW + 1_500, seq)]
        assert store.opened.counts.total("orders") == 0


def test_a_cancel_finds_a_client_chosen_id_and_refuses_what_it_does_not_know(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100], extras={0: Extras(client_id="t/mine")})
        assert ids == ["t/mine"]
        overrides = store.opened.overrides
        assert commit(store, overrides.stage_cancel, "t/other", NOW) is None
        assert commit(store, overrides.stage_cancel, "t/mine", NOW) is State.SCHEDULED
        assert store.opened.reads.join.get_client_id("t/mine").state is State.CANCELLED
        made = send(store, [NOW + 100])[0]
        forged = made[:-1] + ("1" if made.endswith("0") else "0")
        assert commit(store, overrides.stage_cancel, forged, NOW) is None
        assert commit(store, overrides.stage_cancel, made[:12] + "9" * 10 + made[22:], NOW) is None
        assert store.opened.reads.join.get(made).state is State.SCHEDULED


def test_a_nack_delay_moves_a_fired_message_into_the_minute_wheel_and_it_fires_again(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100, NOW + 200])
        (chunk,) = fire(store, NOW + 300).chunks
        overrides, counts = store.opened.overrides, store.opened.counts
        later = NOW + 90_000
        assert commit(store, overrides.stage_move, ids[0], later, "minute") is State.FIRED
        assert override(store, ids[0]) == be.Override(deliver_ms=later)
        seq, index = parse_id(ids[0]).segment, parse_id(ids[0]).message_index
        minute = store.families[CF_WHEEL["minute"]]
        key = bk.wheel_entry_key(later - later % 60_000, seq)
        assert list(zip(*be.decode_wheel_entry(minute[key]), strict=True)) == [(later, index)]
        assert counts.total("orders") == 1
        assert store.opened.reads.join.get(ids[0]).state is State.SCHEDULED
        assert list(dict(store.families[bk.CF_READY].items())) == [chunk.key]  # ids[1] in it
        assert fire(store, later - 1).chunks == []
        (again,) = fire(store, later).chunks  # the firer was told of the minute entry
        assert list(zip(again.segments, again.indexes, strict=True)) == [(seq, index)]
        assert counts.total("orders") == 0
        acked = commit(store, store.opened.acker.stage_ack, [ids[0].encode()], later)
        assert acked.acked == 1


def test_a_reschedule_moves_a_scheduled_message_and_its_counter(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100, NOW + 200])
        overrides, counts = store.opened.overrides, store.opened.counts
        moved = NOW + 65_000
        assert commit(store, overrides.stage_move, ids[1], moved, "second") is State.SCHEDULED
        assert commit(store, overrides.stage_move, ids[1], moved + 5, "second") is State.SCHEDULED
        assert counts.in_range("orders", NOW, NOW + 60_000)[0] == 1
        assert counts.in_range("orders", NOW + 60_000, NOW + 120_000)[0] == 1
        seq = parse_id(ids[1]).segment
        entry = store.families[CF_WHEEL["second"]][bk.wheel_entry_key(moved - moved % 1_000, seq)]
        index = parse_id(ids[1]).message_index
        assert list(zip(*be.decode_wheel_entry(entry), strict=True)) == [
            (moved, index),
            (moved + 5, index),
        ]  # the stale pair stays; the fire passes it over
        fired = fire(store, moved + 10)
        assert [list(c.indexes) for c in fired.chunks] == [[parse_id(ids[0]).message_index, index]]
        assert store.opened.reads.join.get(ids[1]).deliver_at_ms == moved + 5


def test_a_move_to_the_cursor_or_an_unknown_wheel_is_refused(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100, NOW + 200])
        fire(store, NOW + 150)
        overrides = store.opened.overrides
        with pytest.raises(ValueError, match="not after the fire cursor"):
            commit(store, overrides.stage_move, ids[1], NOW + 100, "second")
        with pytest.raises(ValueError, match="wheel 'day'"):
            commit(store, overrides.stage_move, ids[1], NOW + 500, "day")
        assert override(store, ids[1]) is None
        assert store.opened.counts.total("orders") == 1


def test_a_message_an_ack_made_terminal_earlier_in_the_batch_is_not_cancelled(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100])
        fire(store, NOW + 200)
        batch = new_batch()
        assert store.opened.acker.stage_ack(batch, [ids[0].encode()], NOW + 300).acked == 1
        assert store.opened.overrides.stage_cancel(batch, ids[0], NOW + 300) is None
        assert store.opened.overrides.stage_move(batch, ids[0], NOW + 900, "second") is None
        store.opened.commit(batch, sync=False)
        assert dict(store.families[bk.CF_OVERRIDES].items()) == {}
        assert store.opened.reads.join.get(ids[0]).state is State.ACKED
