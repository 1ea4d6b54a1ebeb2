"""Bulk cancel and purge in a real version-2 store (timerwheel.store.segment_bulk finds the
pages, timerwheel.store.segment_moves stages them): one CANCELLED override a message, the
filter and state checked again at staging, the counters against the join, what the fire
takes afterwards (a send into the cancelled range after the call still fires), Get, a
reopen, and the filters refused by name."""

from __future__ import annotations

import pytest
from helpers.batch_v2 import commit, fire, open_v2

from timerwheel.common import State
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import new_batch
from timerwheel.store.segment_bulk import BY_READY, BY_WHEEL, select
from timerwheel.store.segment_send import NewSends
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.domain import InvalidArgument

NOW = 1_200_000
RANGE = TimerFilter(topic="a", from_ms=NOW + 150, to_ms=NOW + 100_000)


def send(store, messages: list[tuple[str, int, str]]) -> list[str]:
    """(topic, deliver ms, wheel) sends in one group commit."""
    sends = NewSends([m[0] for m in messages], [b"x"] * len(messages),
                     [m[1] for m in messages], [m[2] for m in messages])  # fmt: skip
    return store.opened.send(sends, NOW, sync=False).ids


def fired_ids(store, now_ms: int) -> set[str]:
    ids = set()
    for chunk in fire(store, now_ms).chunks:
        for seq, index in zip(chunk.segments, chunk.indexes, strict=True):
            ids.add(store.opened.life.ids(seq)[index].decode())
    return ids


def pages(store, f: TimerFilter, purge: bool, limit: int) -> list[list[str]]:
    out, after = [], None
    while True:
        page = select(store.families, f, purge=purge, after=after, limit=limit)
        out.append(page.ids)
        if page.next is None:
            return out
        after = page.next


def agree(store, topic: str) -> int:
    counted = store.opened.counts.in_range(topic, 0, 10 * 60_000_000)[0]
    assert counted == store.opened.reads.join.count_scheduled(topic)
    return counted


def test_a_bulk_cancel_overrides_each_scheduled_message_of_the_range(tmp_path):
    path = str(tmp_path / "s")
    with open_v2(path) as store:
        a0, a1, a2, b0, a3, a4 = send(store, [
            ("a", NOW + 100, "second"), ("a", NOW + 200, "second"),
            ("a", NOW + 300, "second"), ("b", NOW + 250, "second"),
            ("a", NOW + 70_000, "minute"), ("a", NOW + 200_000, "hour"),
        ])  # fmt: skip
        assert fired_ids(store, NOW + 100) == {a0}
        assert pages(store, RANGE, False, 2) == [[a1, a2], [a3]]
        assert select(store.families, RANGE, purge=False, after=None, limit=2).next[0] == BY_WHEEL
        assert agree(store, "a") == 4
        done = commit(store, store.opened.moves.stage_bulk_cancel, [a1, a2, a3, a3, b0, a0],
                      RANGE, False, NOW + 110)  # fmt: skip
        assert (done.cancelled, done.purged) == ([a1, a2, a3], {})  # b0: not a's; a0: FIRED
        assert len(dict(store.families[bk.CF_OVERRIDES].items())) == 3
        assert agree(store, "a") == 1  # a4, after the range
        assert agree(store, "b") == 1
        for cancelled in (a1, a2, a3):
            got = store.opened.reads.get(cancelled)
            assert (got.state, got.cancelled_at_ms) == (State.CANCELLED, NOW + 110)
        (late,) = send(store, [("a", NOW + 260, "second")])  # sent after the call, in range
        assert pages(store, RANGE, False, 10) == [[late]]
        assert fired_ids(store, NOW + 100_000) == {b0, late}
    with open_v2(path) as store:
        for cancelled in (a1, a2, a3):
            assert store.opened.reads.get(cancelled).state is State.CANCELLED
        assert store.opened.moves.look(new_batch(), a2).state is State.CANCELLED
        assert fired_ids(store, NOW + 200_000) == {a4}
        assert agree(store, "a") == 0


def test_a_purge_also_retires_the_fired_messages_of_the_topic(tmp_path):
    with open_v2(str(tmp_path / "s"), retention_ms=1_000) as store:
        a0, a1, b0, a2 = send(store, [
            ("a", NOW + 100, "second"), ("a", NOW + 200, "second"),
            ("b", NOW + 150, "second"), ("a", NOW + 5_000, "second"),
        ])  # fmt: skip
        fire(store, NOW + 200)
        every_a = TimerFilter(topic="a")
        found = pages(store, every_a, True, 1)
        # The SCHEDULED first; a chunk is taken whole; a full page leaves a token.
        assert found == [[a2], [a0, a1], []]
        assert select(store.families, every_a, purge=True, after=(BY_WHEEL, b"\0" * 18),
                      limit=1).ids == [a2]  # fmt: skip
        page = select(store.families, every_a, purge=True, after=None, limit=2)
        assert page.next[0] == BY_READY and page.ids == [a2, a0, a1]
        done = commit(store, store.opened.moves.stage_bulk_cancel, page.ids, every_a, True,
                      NOW + 300)  # fmt: skip
        assert (done.cancelled, done.purged) == ([a2], {"a": [a0, a1]})
        assert [
            k for k in store.families[bk.CF_READY].keys(from_key=b"") if k.startswith(b"a\0")
        ] == []
        assert store.opened.reads.get(a0).state is State.CANCELLED
        assert store.opened.reads.get(b0).state is State.FIRED
        assert agree(store, "a") == 0
        assert pages(store, every_a, True, 5) == [[]]
        assert fired_ids(store, NOW + 10_000) == set()


def test_the_writer_checks_each_id_again_as_its_batch_leaves_it(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        a1, a2 = send(store, [("a", NOW + 200, "second"), ("a", NOW + 300, "second")])
        (selected,) = pages(store, RANGE, False, 10)
        assert selected == [a1, a2]
        batch = new_batch()
        moved = store.opened.overrides.stage_move(batch, a2, NOW + 200_000, "hour")
        assert moved is State.SCHEDULED  # out of the range before the cancel
        done = store.opened.moves.stage_bulk_cancel(batch, selected, RANGE, False, NOW + 10)
        store.opened.commit(batch, sync=False)
        assert done.cancelled == [a1]
        assert store.opened.reads.get(a2).state is State.SCHEDULED
        assert agree(store, "a") == 1


@pytest.mark.parametrize(
    ("f", "limit", "field"),
    [
        (TimerFilter(series_id="s1"), 5, "filter.series_id='s1'"),
        (TimerFilter(id_prefix="t/"), 5, "filter.id_prefix='t/'"),
        (TimerFilter(topic="a"), 0, "limit=0"),
    ],
)
def test_what_a_version_2_page_does_not_serve_is_refused_by_name(tmp_path, f, limit, field):
    with open_v2(str(tmp_path / "s")) as store:
        with pytest.raises(InvalidArgument, match=field):
            select(store.families, f, purge=False, after=None, limit=limit)
        with pytest.raises(InvalidArgument, match="page_token"):
            select(store.families, TimerFilter(), purge=False, after=(b"x", b""), limit=1)
