"""REPLACE's old copy in a real version-2 store (timerwheel.store.segment_moves): the old
copy's CANCELLED override and the new message's `ids` entry in one group commit, the
counters, what the fire takes afterwards, Get's answers, a reopen, and the refusals of
version 1 (a FIRED or ACKED old copy)."""

from __future__ import annotations

import pytest
from helpers.batch_v2 import commit, fire, open_v2

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import new_batch
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras
from timerwheel.wheels.domain import FailedPrecondition

NOW = 1_200_000
CLIENT = "t/order-7"


def sends(deliver: list[int], client_id: str | None = None, topic: str = "orders") -> NewSends:
    n = len(deliver)
    extras = None if client_id is None else {0: Extras(client_id=client_id)}
    return NewSends([topic] * n, [b"v%d" % i for i in range(n)], deliver, ["second"] * n,
                    extras=extras)  # fmt: skip


def replace(store, deliver_ms: int, now_ms: int, body: bytes = b"new"):
    """One group commit: the old copy's override, then the new message's send."""
    batch = new_batch()
    was = store.opened.moves.stage_replace(batch, CLIENT, now_ms)
    new = sends([deliver_ms], CLIENT)._replace(bodies=[body])
    staged = store.opened.sender.stage(batch, new, now_ms)
    store.opened.commit(batch, sync=False)
    return was, staged.segments[0].seq


def counters_agree(store, topic: str = "orders") -> int:
    """The pending counters and the join's exact count, over whole minutes, are equal."""
    counted = store.opened.counts.in_range(topic, 0, 10 * 60_000_000)[0]
    assert counted == store.opened.reads.join.count_scheduled(topic)
    return counted


def test_a_replace_of_a_scheduled_copy_cancels_it_and_the_new_one_fires(tmp_path):
    path = str(tmp_path / "s")
    with open_v2(path) as store:
        (old_id,) = store.opened.send(sends([NOW + 100], CLIENT), NOW, sync=False).ids
        other = store.opened.send(sends([NOW + 200]), NOW, sync=False).ids[0]
        old = bk.place_key(*be.decode_place(store.families[bk.CF_IDS][bk.ids_key(CLIENT)]))
        assert counters_agree(store) == 2
        was, seq = replace(store, NOW + 500, NOW + 10)
        assert was is State.SCHEDULED
        assert be.decode_override(store.families[bk.CF_OVERRIDES][old]) == be.Override(
            cancelled_at_ms=NOW + 10
        )
        assert be.decode_place(store.families[bk.CF_IDS][bk.ids_key(CLIENT)]) == (seq, 0)
        assert counters_agree(store) == 2  # the old copy left, the new one came
        got = store.opened.reads.get(CLIENT)
        assert (got.state, got.deliver_at_ms, got.body) == (State.SCHEDULED, NOW + 500, b"new")
        (chunk,) = fire(store, NOW + 1_000).chunks
        assert list(zip(chunk.segments, chunk.indexes, strict=True)) == [
            (parse_id(other).segment, 0),
            (seq, 0),
        ]  # the old copy is passed over
        assert counters_agree(store) == 0
        assert old_id == CLIENT
    with open_v2(path) as store:
        assert store.opened.reads.get(CLIENT).state is State.FIRED
        assert store.opened.moves.look(new_batch(), CLIENT).state is State.FIRED
        assert fire(store, NOW + 2_000).chunks == []
        with pytest.raises(FailedPrecondition, match="already FIRED"):
            commit(store, store.opened.moves.stage_replace, CLIENT, NOW + 2_000)


def test_a_replace_of_a_cancelled_copy_stages_nothing_for_it(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        store.opened.send(sends([NOW + 100], CLIENT), NOW, sync=False)
        cancel = store.opened.overrides.stage_cancel
        assert commit(store, cancel, CLIENT, NOW + 5) is State.SCHEDULED
        batch = new_batch()
        assert store.opened.moves.stage_replace(batch, CLIENT, NOW + 10) is State.CANCELLED
        assert not batch.writes[bk.CF_OVERRIDES] and not batch.count_deltas
        was, seq = replace(store, NOW + 300, NOW + 10)
        assert was is State.CANCELLED
        assert store.opened.reads.get(CLIENT).state is State.SCHEDULED
        assert counters_agree(store) == 1
        (chunk,) = fire(store, NOW + 400).chunks
        assert list(zip(chunk.segments, chunk.indexes, strict=True)) == [(seq, 0)]


def test_a_replace_of_a_fired_or_acked_copy_is_refused_and_stages_nothing(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        store.opened.send(sends([NOW + 100], CLIENT), NOW, sync=False)
        fire(store, NOW + 100)
        batch = new_batch()
        with pytest.raises(FailedPrecondition, match=r"message_id='t/order-7': already FIRED"):
            store.opened.moves.stage_replace(batch, CLIENT, NOW + 200)
        assert not any(batch.writes.values()) and not batch.count_deltas
        # ACKED: a client id's message is acked here by its place's server-made id.
        seq, index = be.decode_place(store.families[bk.CF_IDS][bk.ids_key(CLIENT)])
        made = store.opened.life.ids(seq)[index]
        assert commit(store, store.opened.acker.stage_ack, [made], NOW + 300).acked == 1
        with pytest.raises(FailedPrecondition, match="already ACKED"):
            commit(store, store.opened.moves.stage_replace, CLIENT, NOW + 400)
        assert store.opened.reads.get(CLIENT).state is State.ACKED


def test_a_replace_of_a_free_id_is_a_plain_send(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        assert commit(store, store.opened.moves.stage_replace, CLIENT, NOW) is None
        was, _ = replace(store, NOW + 100, NOW)
        assert was is None
        assert dict(store.families[bk.CF_OVERRIDES].items()) == {}
        assert counters_agree(store) == 1


def test_a_replace_in_the_batch_of_the_old_send_cancels_the_staged_copy(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        batch = new_batch()
        store.opened.sender.stage(batch, sends([NOW + 100], CLIENT), NOW)
        assert store.opened.moves.stage_replace(batch, CLIENT, NOW) is State.SCHEDULED
        new = NewSends(["orders"], [b"new"], [NOW + 200], ["second"],
                       extras={0: Extras(client_id=CLIENT)})  # fmt: skip
        store.opened.sender.stage(batch, new, NOW)
        store.opened.commit(batch, sync=False)
        assert counters_agree(store) == 1
        assert store.opened.reads.get(CLIENT).deliver_at_ms == NOW + 200
        (chunk,) = fire(store, NOW + 300).chunks
        assert len(chunk.indexes) == 1
