"""The dead-letter move in a real version-2 store (timerwheel.store.segment_moves): the
copy sent under the dead-letter topic with version 1's properties (the origin topic a
redrive follows), the old copy retired by one override that names where it went, the
counters, the fire, Get, the Ack of the copy and a reopen."""

from __future__ import annotations

from helpers.batch_v2 import commit, fire, open_v2

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import new_batch
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_moves import DEAD_LETTER_MESSAGE_ID, DeadLetter
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras
from timerwheel.wheels.bulk import DEAD_LETTER_ORIGIN, DEAD_LETTER_PREFIX

NOW = 1_200_000
DLQ = "orders.dlq"


def fired_two(store) -> list[str]:
    """Two FIRED messages of "orders": one with properties, one with a client id."""
    extras = {0: Extras(properties={"k": "v"}, flags=1), 1: Extras(client_id="t/c")}
    sends = NewSends(["orders"] * 2, [b"b0", b"b1"], [NOW + 100, NOW + 200], ["second"] * 2,
                     extras=extras)  # fmt: skip
    ids = store.opened.send(sends, NOW, sync=False).ids
    fire(store, NOW + 300)
    return ids


def test_a_dead_letter_move_copies_the_message_and_retires_the_old_one(tmp_path):
    path = str(tmp_path / "s")
    with open_v2(path) as store:
        ids = fired_two(store)
        assert ids[1] == "t/c"
        old_seq = parse_id(ids[0]).segment
        moves = [
            DeadLetter("orders", ids[0], DLQ, 5, "too many"),
            DeadLetter("orders", "t/c", DLQ, 5, "too many"),
            DeadLetter("other", ids[0], DLQ, 5, "not its topic"),
            DeadLetter("orders", ids[0], DLQ, 5, "named twice"),
            DeadLetter("orders", "t/unknown", DLQ, 5, "no such message"),
        ]
        out = commit(store, store.opened.moves.stage_dead_letters, moves, NOW + 400)
        assert out[1:] == ["t/c", None, None, None]
        copy = out[0]
        assert copy is not None and copy != ids[0]
        new_seq = parse_id(copy).segment
        assert new_seq > old_seq and be.decode_place(
            store.families[bk.CF_IDS][bk.ids_key("t/c")]
        ) == (new_seq, 1)  # one call's moves, one segment; the client id moved with it
        for index in (0, 1):
            raw = store.families[bk.CF_OVERRIDES][bk.place_key(old_seq, index)]
            assert be.decode_override(raw) == be.Override(cancelled_at_ms=NOW + 400, topic=DLQ)
        assert dict(store.families[bk.CF_READY].items()) == {}  # the old chunk went
        assert store.families[bk.CF_SEGSTATE].get(bk.segment_key(old_seq)) is not None
        counts = store.opened.counts
        assert (counts.total("orders"), counts.total(DLQ)) == (0, 2)
        got = store.opened.reads.get(copy)
        assert (got.state, got.topic, got.body, got.deliver_at_ms) == (
            State.SCHEDULED, DLQ, b"b0", NOW + 400,
        )  # fmt: skip
        assert got.properties == {
            "k": "v",
            DEAD_LETTER_ORIGIN: "orders",
            DEAD_LETTER_PREFIX + "attempts": "5",
            DEAD_LETTER_PREFIX + "reason": "too many",
            DEAD_LETTER_PREFIX + "at_ms": str(NOW + 400),
            DEAD_LETTER_MESSAGE_ID: ids[0],
        }
        old = store.opened.reads.get(ids[0])
        assert (old.state, old.topic, old.cancelled_at_ms) == (State.CANCELLED, DLQ, NOW + 400)
        view_extras = store.opened.moves.look(new_batch(), copy).view.extras(0)
        assert view_extras.flags == 0  # send options are dropped, as version 1 drops them
        (chunk,) = fire(store, NOW + 400).chunks
        assert (chunk.topic, list(chunk.segments), list(chunk.indexes)) == (
            DLQ, [new_seq, new_seq], [0, 1],
        )  # fmt: skip
        assert counts.total(DLQ) == 0
        assert store.opened.reads.get("t/c").state is State.FIRED
    with open_v2(path) as store:
        assert store.opened.reads.get(copy).state is State.FIRED
        assert store.opened.moves.look(new_batch(), "t/c").state is State.FIRED
        assert store.opened.reads.get(ids[0]).state is State.CANCELLED
        acked = commit(store, store.opened.acker.stage_ack, [copy.encode()], NOW + 500)
        assert (acked.acked, acked.refused) == (1, [])
        assert fire(store, NOW + 10_000).chunks == []


def test_a_move_of_what_is_not_fired_on_its_topic_stages_nothing(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        sends = NewSends(["orders"] * 2, [b"b0", b"b1"], [NOW + 100, NOW + 900], ["second"] * 2)
        ids = store.opened.send(sends, NOW, sync=False).ids
        fire(store, NOW + 200)
        commit(store, store.opened.acker.stage_ack, [ids[0].encode()], NOW + 300)
        batch = new_batch()
        moves = [DeadLetter("orders", ids[0], DLQ, 1, "acked"),
                 DeadLetter("orders", ids[1], DLQ, 1, "scheduled")]  # fmt: skip
        assert store.opened.moves.stage_dead_letters(batch, moves, NOW + 400) == [None, None]
        assert not any(batch.writes.values()) and not batch.count_deltas


def test_a_dead_letter_copy_is_never_due_before_the_fire_cursor(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = fired_two(store)
        fire(store, NOW + 5_000)  # the cursor stays on the last place passed
        out = commit(
            store, store.opened.moves.stage_dead_letters,
            [DeadLetter("orders", ids[0], DLQ, 2, "late")], NOW + 50,
        )  # fmt: skip
        assert store.opened.reads.get(out[0]).deliver_at_ms == NOW + 200  # the cursor's ms
        (chunk,) = fire(store, NOW + 5_000).chunks
        assert chunk.topic == DLQ
