"""The version-2 send (timerwheel.store.segment_send) into a real version-2 store
(timerwheel.store.batch_store), read back through the join's readers
(timerwheel.store.batch_reads) and the pending counters, as version 1's Get, List and
Count answer."""

from __future__ import annotations

import random
import tempfile

import pytest
from helpers.batch_v2 import open_v2
from helpers.budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import new_batch, open_batch_store
from timerwheel.store.integrity import StoreDamaged
from timerwheel.store.keys import CF_WHEEL
from timerwheel.store.open_store import open_store
from timerwheel.store.rocks import RocksTuning
from timerwheel.store.segment_ids import ID_HEX_DIGITS, parse_id
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras, SegmentView
from timerwheel.wheels.domain import NO_PROPERTIES, When, WhenKind
from timerwheel.wheels.scheduler import Scheduler

NOW = 1_200_000  # a whole minute
UNSYNCED = RocksTuning(sync_writes=False)


def new_state():
    return Scheduler.fresh(NOW, (50_000, 300_000)).state


def sends(deliver: list[int], wheels: list[str], topics: list[str] | None = None, **more):
    topics = topics or ["orders"] * len(deliver)
    bodies = [b"body %d" % i for i in range(len(deliver))]
    return NewSends(topics, bodies, deliver, wheels, **more)


def entries(store, family: str) -> dict[bytes, bytes]:
    return dict(store.families[family].items())


def test_a_commit_is_cut_by_wheel_and_segment_max_in_deliver_order(tmp_path):
    deliver = [NOW + 900, NOW + 100, NOW + 70_000, NOW + 500, NOW + 100, NOW + 65_000]
    wheels = ["second", "second", "minute", "second", "second", "minute"]
    with open_v2(str(tmp_path / "s"), segment_max=3) as store:
        staged = store.opened.send(sends(deliver, wheels), NOW, sync=False)
        # second wheel: 1, 4, 3 | 0 (by deliver time, ties in send order); minute: 5, 2
        assert [list(s.positions) for s in staged.segments] == [[1, 4, 3], [0], [5, 2]]
        assert [s.seq for s in staged.segments] == [1, 2, 3]
        for position, message_id in enumerate(staged.ids):
            parsed = parse_id(message_id)
            assert len(message_id) == ID_HEX_DIGITS
            assert parsed.deliver_ms == deliver[position]
            segment = staged.segments[parsed.segment - 1]
            assert segment.positions[parsed.message_index] == position
        views = {
            bk.segment_seq(k): SegmentView(v) for k, v in entries(store, bk.CF_SEGMENTS).items()
        }
        assert views[1].deliver_column().tolist() == [NOW + 100, NOW + 100, NOW + 500]
        assert views[1].bodies(range(3)) == [b"body 1", b"body 4", b"body 3"]
        assert views[3].created_ms == NOW


def test_a_wheel_entry_a_slot_and_segment_holds_its_sorted_pairs(tmp_path):
    deliver = [NOW + 100, NOW + 1_700, NOW + 1_200, NOW + 120_500, NOW + 60_000]
    wheels = ["second", "second", "second", "minute", "minute"]
    with open_v2(str(tmp_path / "s")) as store:
        store.opened.send(sends(deliver, wheels), NOW, sync=False)
        second = {
            bk.decode_wheel_entry_key(k): [list(c) for c in be.decode_wheel_entry(v)]
            for k, v in entries(store, CF_WHEEL["second"]).items()
        }
        assert second == {
            (NOW, 1): [[NOW + 100], [0]],
            (NOW + 1_000, 1): [[NOW + 1_200, NOW + 1_700], [1, 2]],
        }
        minute = {
            bk.decode_wheel_entry_key(k): [list(c) for c in be.decode_wheel_entry(v)]
            for k, v in entries(store, CF_WHEEL["minute"]).items()
        }
        assert minute == {(NOW + 60_000, 2): [[NOW + 60_000], [0]], (NOW + 120_000, 2): [
            [NOW + 120_500], [1]]}  # fmt: skip
        assert entries(store, CF_WHEEL["hour"]) == {}


def test_get_reports_what_was_sent_with_its_wheel(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        staged = store.opened.send(
            sends([NOW + 100, NOW + 90_000], ["second", "minute"], ["orders", "mail"]),
            NOW, sync=False,
        )  # fmt: skip
        first = store.opened.reads.get(staged.ids[0])
        assert (first.topic, first.body, first.deliver_at_ms, first.created_at_ms) == (
            "orders", b"body 0", NOW + 100, NOW,
        )  # fmt: skip
        assert (first.state, first.when, first.wheel) == (
            State.SCHEDULED, When(WhenKind.DELAY, 100), "second",
        )  # fmt: skip
        assert first.properties == NO_PROPERTIES
        second = store.opened.reads.get(staged.ids[1])
        assert (second.topic, second.wheel) == ("mail", "minute")
        assert store.opened.reads.find_wheel(second, ["second", "hour"]) == ""
        assert store.opened.reads.find_wheel(second, ["minute"]) == "minute"
        forged = staged.ids[0][:-1] + ("1" if staged.ids[0][-1] == "0" else "0")
        assert store.opened.reads.get(forged) is None


def test_a_client_chosen_id_gets_an_ids_entry_and_keeps_its_properties(tmp_path):
    extras = {1: Extras(client_id="tenant/order-7", properties={"k": "v"})}
    with open_v2(str(tmp_path / "s")) as store:
        staged = store.opened.send(
            sends([NOW + 300, NOW + 200], ["second", "second"], extras=extras), NOW, sync=False
        )
        assert staged.ids[1] == "tenant/order-7"
        assert len(staged.ids[0]) == ID_HEX_DIGITS
        assert entries(store, bk.CF_IDS) == {b"tenant/order-7": be.place_value(1, 0)}
        timer = store.opened.reads.get("tenant/order-7")
        assert (timer.message_id, timer.body, timer.deliver_at_ms) == (
            "tenant/order-7", b"body 1", NOW + 200,
        )  # fmt: skip
        assert dict(timer.properties) == {"k": "v"}
        assert timer.wheel == "second"
        assert store.opened.sender.client_place(new_batch(), "tenant/order-7") == (1, 0)
        assert store.opened.reads.get("tenant/order-8") is None
        # An unscoped client id may look like a server-made one; its `ids` entry finds it.
        look_alike = "0" * ID_HEX_DIGITS
        shaped = store.opened.send(
            sends([NOW + 5], ["second"], extras={0: Extras(client_id=look_alike)}), NOW
        )
        assert shaped.ids == [look_alike]
        assert store.opened.reads.get(look_alike).body == b"body 0"
        # A later send under the id (a REPLACE, once the caller allowed it) takes the entry.
        again = store.opened.send(sends([NOW + 900], ["second"], extras={0: extras[1]}), NOW)
        assert again.ids == ["tenant/order-7"]
        assert store.opened.reads.get("tenant/order-7").deliver_at_ms == NOW + 900


def test_whens_the_columns_cannot_give_are_kept_beside_them(tmp_path):
    whens = [
        When(WhenKind.DELIVER_AT, NOW + 100),
        When(WhenKind.DELIVER_AT, NOW + 200),
        When(WhenKind.LEVEL, 3),
        When(WhenKind.DELAY, 400),
    ]
    deliver = [NOW + 100, NOW + 200, NOW + 300, NOW + 400]
    with open_v2(str(tmp_path / "s")) as store:
        staged = store.opened.send(sends(deliver, ["second"] * 4, whens=whens), NOW, sync=False)
        assert [store.opened.reads.get(i).when for i in staged.ids] == whens
        (raw,) = entries(store, bk.CF_SEGMENTS).values()
        view = SegmentView(raw)
        assert view.when_kind == WhenKind.DELAY  # two of four are DELIVER_AT: not most
        assert [view.extras(i) is not None for i in range(4)] == [True, True, True, False]


def test_a_send_before_the_fire_cursor_is_refused_and_stages_nothing(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        store.write({bk.CF_META: {bk.META_FIRE_CURSOR: be.cursor_value(NOW, 0, 0)}})
        batch = new_batch()
        with pytest.raises(ValueError, match=f"before the fire cursor's {NOW}"):
            store.opened.sender.stage(batch, sends([NOW - 1, NOW], ["second"] * 2), NOW)
        assert all(not writes for writes in batch.writes.values())
        assert store.opened.sender.segment_seq == 0
        staged = store.opened.send(sends([NOW], ["second"]), NOW, sync=False)  # at it: kept
        assert store.opened.reads.get(staged.ids[0]).state is State.SCHEDULED


@pytest.mark.parametrize(
    ("columns", "error"),
    [
        (NewSends(["t"], [b""], [NOW, NOW], ["second"]), "columns of"),
        (NewSends([], [], [], []), "columns of"),
        (NewSends(["t"], [b""], [NOW], ["day"]), "are not"),
    ],
)
def test_columns_that_do_not_make_sends_are_refused(tmp_path, columns, error):
    with open_v2(str(tmp_path / "s")) as store, pytest.raises(ValueError, match=error):
        store.opened.sender.stage(new_batch(), columns, NOW)


def test_more_topics_than_a_segment_table_holds_make_more_segments(tmp_path):
    topics = [f"t{i}" for i in range(300)]
    with open_v2(str(tmp_path / "s")) as store:
        staged = store.opened.send(sends([NOW + 5] * 300, ["second"] * 300, topics), NOW)
        assert [len(s.positions) for s in staged.segments] == [150, 150]
        assert [store.opened.reads.get(i).topic for i in staged.ids] == topics


def test_segment_seqs_continue_after_a_reopen(tmp_path):
    path = str(tmp_path / "s")
    with open_v2(path) as store:
        first = store.opened.send(sends([NOW + 5] * 3, ["second"] * 3), NOW, sync=False)
    with open_v2(path, seed=1) as store:
        later = store.opened.send(sends([NOW + 5], ["second"]), NOW, sync=False)
        assert [s.seq for s in later.segments] == [2]
        assert store.opened.reads.get(first.ids[2]).body == b"body 2"


def test_list_pages_and_count_answer_as_version_1s(tmp_path):
    rng = random.Random(7)
    deliver = [NOW + rng.randrange(0, 400_000) for _ in range(200)]
    wheels = ["second" if d < NOW + 1_000 else "minute" if d < NOW + 60_000 else "hour"
              for d in deliver]  # fmt: skip
    topics = [rng.choice(("orders", "mail")) for _ in deliver]
    with open_v2(str(tmp_path / "s"), segment_max=16) as store:
        half = 100
        one = store.opened.send(sends(deliver[:half], wheels[:half], topics[:half]), NOW)
        two = store.opened.send(sends(deliver[half:], wheels[half:], topics[half:]), NOW)
        ids = one.ids + two.ids
        reads = store.opened.reads
        for topic in ("orders", "mail"):
            mine = sorted(
                (d, parse_id(i).segment, parse_id(i).message_index, i)
                for d, t, i in zip(deliver, topics, ids, strict=True)
                if t == topic
            )
            listed, after = [], None
            while True:
                page = reads.list_pending(topic, 0, 2**62, 7, after)
                listed += page.timers
                after = page.next_after
                if after is None:
                    break
            assert [t.message_id for t in listed] == [m[3] for m in mine]
            assert all(t.state is State.SCHEDULED and t.body for t in listed)
            lo, hi = NOW + 120_000, NOW + 240_000  # whole minutes: the counters are exact
            in_range = sum(lo <= m[0] < hi for m in mine)
            assert reads.count_pending(topic, lo, hi) == in_range
            assert store.opened.counts.in_range(topic, lo, hi)[0] == in_range
            assert store.opened.counts.total(topic) == len(mine) == reads.count_pending(topic)
            bare = reads.list_pending(topic, 0, 2**62, 500, None, include_body=False)
            assert [t.body for t in bare.timers] == [b""] * len(mine)


def test_a_page_ends_at_its_byte_budget_and_continues_after_its_last(tmp_path):
    with open_v2(str(tmp_path / "s")) as store:
        staged = store.opened.send(sends([NOW + i for i in range(1, 6)], ["second"] * 5), NOW)
        reads = store.opened.reads
        size = len(b"body 0") + len("orders")
        page = reads.list_pending("orders", 0, 2**62, 100, None, max_bytes=2 * size)
        assert [t.message_id for t in page.timers] == staged.ids[:2]
        rest = reads.list_pending("orders", 0, 2**62, 100, page.next_after)
        assert [t.message_id for t in rest.timers] == staged.ids[2:]
        assert rest.next_after is None
        one = reads.list_pending("orders", 0, 2**62, 100, None, max_bytes=1)
        assert len(one.timers) == 1  # one at least


def test_the_v1_open_refuses_a_v2_store_and_the_v2_open_upgrades_a_v1_one(tmp_path):
    v2, v1 = str(tmp_path / "v2"), str(tmp_path / "v1")
    open_batch_store(v2, UNSYNCED).close()
    with pytest.raises(StoreDamaged):
        open_store(v2, UNSYNCED, new_state)
    store, _, _ = open_store(v1, UNSYNCED, new_state)
    store.close()
    open_batch_store(v1, UNSYNCED).close()  # upgraded (tests/store/test_segment_upgrade.py)
    with pytest.raises(StoreDamaged):
        open_store(v1, UNSYNCED, new_state)
    open_batch_store(v2, UNSYNCED).close()  # and its own opens again


send_rows = st.lists(
    st.tuples(
        st.sampled_from(("orders", "mail", "jobs")),
        st.integers(0, 4_000_000),  # delay ms
        st.sampled_from((WhenKind.DELAY, WhenKind.DELIVER_AT, WhenKind.LEVEL)),
        st.booleans(),  # a client-chosen id
        st.dictionaries(st.sampled_from("ab"), st.text(max_size=3), max_size=2),
    ),
    min_size=1,
    max_size=40,
)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(send_rows, min_size=1, max_size=3), st.integers(1, 8))
def test_every_send_reads_back_as_sent(commits, segment_max):
    """Commits of random sends, cut into random segment sizes: Get of each id and List of
    each topic answer exactly what was sent."""
    expected: dict[str, tuple] = {}
    with tempfile.TemporaryDirectory() as path, open_v2(path, segment_max=segment_max) as store:
        for number, rows in enumerate(commits):
            deliver = [NOW + delay for _, delay, _, _, _ in rows]
            whens = [
                When(kind, {WhenKind.DELAY: d - NOW, WhenKind.DELIVER_AT: d}.get(kind, 2))
                for d, (_, _, kind, _, _) in zip(deliver, rows, strict=True)
            ]
            extras = {
                i: Extras(client_id=f"s/{number}-{i}" if own else None, properties=props)
                for i, (_, _, _, own, props) in enumerate(rows)
                if own or props
            }
            wheels = [("second", "minute", "hour")[min(d // 1_000_000, 2)] for _, d, *_ in rows]
            staged = store.opened.send(
                sends(deliver, wheels, [t for t, *_ in rows], whens=whens, extras=extras),
                NOW, sync=False,
            )  # fmt: skip
            for i, message_id in enumerate(staged.ids):
                body = b"body %d" % i
                expected[message_id] = (
                    rows[i][0],
                    body,
                    deliver[i],
                    whens[i],
                    rows[i][4],
                    wheels[i],
                )
        for message_id, (topic, body, deliver_ms, when, props, wheel) in expected.items():
            timer = store.opened.reads.get(message_id)
            assert (timer.message_id, timer.topic, timer.body, timer.deliver_at_ms) == (
                message_id, topic, body, deliver_ms,
            )  # fmt: skip
            assert (timer.when, dict(timer.properties), timer.wheel) == (when, props, wheel)
        for topic in ("orders", "mail", "jobs"):
            listed = store.opened.reads.list_pending(topic, 0, 2**62, 10_000, None).timers
            assert sorted(t.message_id for t in listed) == sorted(
                i for i, found in expected.items() if found[0] == topic
            )
            assert [t.deliver_at_ms for t in listed] == sorted(t.deliver_at_ms for t in listed)
            assert store.opened.counts.total(topic) == len(listed)
