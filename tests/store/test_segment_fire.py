"""The version-2 fire and cascade (timerwheel.store.segment_fire) in a real version-2 store
(timerwheel.store.batch_store): cursor order across segments, a `ready` entry a (fire
chunk, topic), the limit, the places the join's rule passes over, the counters, the
cascade of upper entries a batch, a send fired in its own commit, and a reopen."""

from __future__ import annotations

import pytest
from helpers.batch_v2 import open_v2

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import new_batch
from timerwheel.store.keys import CF_WHEEL, decode_u64
from timerwheel.store.segment_fire import Fired, SegmentFirer
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_send import NewSends

NOW = 1_200_000  # a whole minute, inside the hour slot that starts at 0


def send(store, deliver: list[int], wheel: str = "second", topics=None, now_ms: int = NOW):
    topics = topics or ["orders"] * len(deliver)
    bodies = [b"b%d" % i for i in range(len(deliver))]
    sends = NewSends(topics, bodies, deliver, [wheel] * len(deliver))
    return store.opened.send(sends, now_ms, sync=False).ids


def fire(store, now_ms: int, limit: int = 1_000, firer: SegmentFirer | None = None):
    batch = new_batch()
    fired = (firer or store.opened.firer).stage(batch, now_ms, limit)
    store.opened.commit(batch, sync=False)
    return fired


def places(fired) -> list[tuple[int, int]]:
    return [p for chunk in fired.chunks for p in zip(chunk.segments, chunk.indexes, strict=True)]


def place_of(message_id: str) -> tuple[int, int]:
    parsed = parse_id(message_id)
    return parsed.segment, parsed.message_index


def entries(store, family: str) -> dict[bytes, bytes]:
    return dict(store.families[family].items())


def pairs(store, wheel: str) -> dict[tuple[int, int], list[tuple[int, int]]]:
    """{(slot start, segment): its (deliver ms, index) pairs} of one wheel."""
    return {
        bk.decode_wheel_entry_key(k): list(zip(*be.decode_wheel_entry(v), strict=True))
        for k, v in entries(store, CF_WHEEL[wheel]).items()
    }


def test_a_fire_takes_due_places_in_cursor_order_a_ready_entry_a_topic(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        first = send(store, [NOW + 300, NOW + 100, NOW + 1_500], topics=["a", "b", "a"])
        second = send(store, [NOW + 100, NOW + 200], topics=["b", "a"])
        fired = fire(store, NOW + 300)
        order = [first[1], second[0], second[1], first[0]]  # (100, 1), (100, 2), 200, 300
        assert sorted(places(fired)) == sorted(map(place_of, order))
        assert [(c.topic, c.seq) for c in fired.chunks] == [("b", 1), ("a", 2)]
        by_topic = {c.topic: list(zip(c.segments, c.indexes, strict=True)) for c in fired.chunks}
        assert by_topic == {
            "b": [place_of(first[1]), place_of(second[0])],
            "a": [place_of(second[1]), place_of(first[0])],
        }
        ready = {k: be.decode_refs(v) for k, v in entries(store, bk.CF_READY).items()}
        assert {k: (r.time_ms, len(r.segments)) for k, r in ready.items()} == {
            bk.chunk_key("b", 1): (NOW + 300, 2),
            bk.chunk_key("a", 2): (NOW + 300, 2),
        }
        meta = store.families[bk.CF_META]
        last = (NOW + 300, *place_of(first[0]))
        assert fired.cursor == last == be.decode_cursor(meta[bk.META_FIRE_CURSOR])
        assert decode_u64(meta[bk.META_CHUNK_SEQ]) == 2
        # the entries the cursor passed whole are deleted; segment 1 keeps its 1,500
        assert pairs(store, "second") == {(NOW + 1_000, 1): [(NOW + 1_500, 2)]}
        got = store.opened.reads.join.get(first[0])
        assert (got.state, got.fired_at_ms) == (State.FIRED, NOW + 300)
        assert store.opened.reads.join.get(first[2]).state is State.SCHEDULED


def test_a_limit_stops_the_fire_and_the_next_goes_on_from_the_cursor(tmp_path):
    with open_v2(str(tmp_path / "s"), segment_max=4) as store:
        ids = send(store, [NOW + 10 * (i % 5) for i in range(11)])  # three segments
        seen, rounds = [], 0
        while True:
            fired = fire(store, NOW + 100, limit=3)
            seen += places(fired)
            rounds += 1
            if not fired.more:
                break
        assert rounds == 4 and len(seen) == len(set(seen)) == 11
        deliver = {place_of(i): parse_id(i).deliver_ms for i in ids}
        assert [(deliver[p], *p) for p in seen] == sorted((deliver[p], *p) for p in seen)
        assert fire(store, NOW + 100).chunks == [] and pairs(store, "second") == {}


def test_cancelled_moved_and_swept_places_are_passed_over(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 100, NOW + 200, NOW + 300, NOW + 400])
        gone = send(store, [NOW + 150])
        firer = store.opened.firer
        cancelled, moved = place_of(ids[0]), place_of(ids[2])
        for (seq, index), override in (
            (cancelled, be.Override(cancelled_at_ms=NOW)),
            (moved, be.Override(deliver_ms=NOW + 1_100)),
        ):
            store.write({bk.CF_OVERRIDES: {bk.place_key(seq, index): be.override_value(override)}})
            firer.overridden(seq, index, override)
        moved_key = bk.wheel_entry_key(NOW + 1_000, moved[0])
        store.write({CF_WHEEL["second"]: {moved_key: be.wheel_entry([NOW + 1_100], [moved[1]])}})
        store.write({bk.CF_SEGMENTS: {bk.segment_key(place_of(gone[0])[0]): None}})
        firer.forget(place_of(gone[0])[0])
        fired = fire(store, NOW + 1_000)
        assert places(fired) == [place_of(ids[1]), place_of(ids[3])]
        assert fired.cursor == (NOW + 400, *place_of(ids[3]))  # passed the others too
        assert pairs(store, "second") == {(NOW + 1_000, 1): [(NOW + 1_100, moved[1])]}
        # a Nack's delay rewrites the entry the last fire read: the firer reads it again
        nacked, delay = place_of(ids[1]), be.Override(deliver_ms=NOW + 1_050)
        store.write({
            bk.CF_OVERRIDES: {bk.place_key(*nacked): be.override_value(delay)},
            CF_WHEEL["second"]: {moved_key: be.wheel_entry(
                [NOW + 1_050, NOW + 1_100], [nacked[1], moved[1]])},
        })  # fmt: skip
        firer.overridden(*nacked, delay)
        assert places(fire(store, NOW + 1_100)) == [nacked, moved]
        assert pairs(store, "second") == {}


def test_the_fire_subtracts_what_the_send_counted(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        send(store, [NOW + 100, NOW + 200, NOW + 60_100], topics=["a", "b", "a"])
        counts = store.opened.counts
        assert (counts.total("a"), counts.total("b")) == (2, 1)
        fire(store, NOW + 150)
        assert (counts.total("a"), counts.total("b")) == (1, 1)
        assert counts.in_range("a", NOW, NOW + 60_000)[0] == 0
        assert counts.in_range("a", NOW + 60_000, NOW + 120_000)[0] == 1
        fire(store, NOW + 60_100)
        assert counts.totals() == {}
        assert entries(store, bk.CF_COUNTS) == {}


def test_an_hour_entry_cascades_to_minute_entries_and_on_to_second_ones(tmp_path):
    deliver = [NOW + 500, NOW + 700, NOW + 60_200, NOW + 61_300, NOW + 180_000]
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, deliver, wheel="hour")
        assert list(pairs(store, "hour")) == [(0, 1)]
        fired = fire(store, NOW)  # the hour and the minute have started, nothing is due
        assert fired.chunks == [] and not fired.more
        assert pairs(store, "hour") == {}
        assert pairs(store, "minute") == {
            (NOW + 60_000, 1): [(NOW + 60_200, 2), (NOW + 61_300, 3)],
            (NOW + 180_000, 1): [(NOW + 180_000, 4)],
        }
        assert pairs(store, "second") == {(NOW, 1): [(NOW + 500, 0), (NOW + 700, 1)]}
        assert places(fire(store, NOW + 60_500)) == list(map(place_of, ids[:3]))
        assert pairs(store, "minute") == {(NOW + 180_000, 1): [(NOW + 180_000, 4)]}
        assert pairs(store, "second") == {(NOW + 61_000, 1): [(NOW + 61_300, 3)]}
        assert places(fire(store, NOW + 200_000)) == list(map(place_of, ids[3:]))
        assert all(pairs(store, wheel) == {} for wheel in ("hour", "minute", "second"))


def test_an_entry_sent_into_a_started_slot_after_a_walk_is_cascaded(tmp_path):
    """The fire walks an upper wheel only when a slot started or an entry came: the send
    tells it of an hour entry, and the hour's cascade of a minute entry."""
    with open_v2(str(tmp_path / "s")) as store:
        send(store, [NOW + 50])
        assert len(places(fire(store, NOW + 100))) == 1  # both upper wheels walked, empty
        ids = send(store, [NOW + 500, NOW + 70_000], wheel="hour", now_ms=NOW + 100)
        assert places(fire(store, NOW + 600)) == [place_of(ids[0])]
        assert list(pairs(store, "minute")) == [(NOW + 60_000, place_of(ids[1])[0])]


def test_a_cascade_merges_with_the_lower_entry_it_meets(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        ids = send(store, [NOW + 60_100, NOW + 60_300], wheel="minute")
        seq = place_of(ids[0])[0]
        # a Reschedule's pair of another message of the segment, already in the second wheel
        moved = be.Override(deliver_ms=NOW + 60_200)
        store.write({
            bk.CF_OVERRIDES: {bk.place_key(seq, 1): be.override_value(moved)},
            CF_WHEEL["second"]: {
                bk.wheel_entry_key(NOW + 60_000, seq): be.wheel_entry([NOW + 60_200], [1])
            },
        })  # fmt: skip
        store.opened.firer.overridden(seq, 1, moved)
        assert fire(store, NOW + 60_000).chunks == []
        assert pairs(store, "second") == {
            (NOW + 60_000, seq): [(NOW + 60_100, 0), (NOW + 60_200, 1), (NOW + 60_300, 1)]
        }
        fired = fire(store, NOW + 61_000)
        assert places(fired) == [(seq, 0), (seq, 1)]  # 60,300 is no place of message 1 now
        assert fired.cursor == (NOW + 60_300, seq, 1) and pairs(store, "second") == {}


def test_a_cascade_stopped_at_its_limit_holds_the_fire_before_what_it_left(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        early = send(store, [NOW + 100], wheel="minute")
        late = send(store, [NOW + 60_100], wheel="minute")
        due = send(store, [NOW + 60_500])  # second wheel, after `late` but before now
        firer = SegmentFirer(store.families, cascade_max=1)
        fired = fire(store, NOW + 61_000, firer=firer)
        assert places(fired) == [place_of(early[0])] and fired.more
        assert list(pairs(store, "minute")) == [(NOW + 60_000, place_of(late[0])[0])]
        fired = fire(store, NOW + 61_000, firer=firer)
        assert places(fired) == [place_of(late[0]), place_of(due[0])] and not fired.more
    with pytest.raises(ValueError, match="at least 1"):
        SegmentFirer({}, cascade_max=0)


def test_a_send_due_at_once_fires_in_its_own_commit(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        batch = new_batch()
        sent = store.opened.sender.stage(batch, NewSends(["a"], [b"x"], [NOW], ["second"]), NOW)
        fired = store.opened.firer.stage(batch, NOW, 10)
        store.opened.commit(batch, sync=False)
        assert places(fired) == [place_of(sent.ids[0])]
        assert store.opened.reads.join.get(sent.ids[0]).state is State.FIRED
        assert pairs(store, "second") == {} and store.opened.counts.totals() == {}


def test_nothing_due_stages_nothing_and_a_bad_limit_is_refused(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        send(store, [NOW + 5_000])
        batch = new_batch()
        fired = store.opened.firer.stage(batch, NOW + 4_999, 10)
        assert fired == Fired([], (-1, 0, 0), False)
        assert not any(batch.writes.values()) and not batch.count_deltas
        with pytest.raises(ValueError, match="at most 0"):
            store.opened.firer.stage(batch, NOW, 0)


def test_a_reopened_store_fires_on_from_its_cursor_and_chunk_seq(tmp_path):
    path = str(tmp_path / "s")
    with open_v2(path) as store:
        ids = send(store, [NOW + 100, NOW + 200, NOW + 300])
        assert places(fire(store, NOW + 200)) == list(map(place_of, ids[:2]))
    with open_v2(path) as store:
        assert store.opened.firer.cursor() == (NOW + 200, *place_of(ids[1]))
        fired = fire(store, NOW + 1_000)
        assert places(fired) == [place_of(ids[2])]
        assert [c.seq for c in fired.chunks] == [2]
