"""Each row of the state join's rule (timerwheel.store.batch_state), with the entries that
decide it written by hand with the step-1 codecs into real RocksDB, and the entries a
lower row would read present too, so that the order of the rows is what is tested."""

from __future__ import annotations

import pytest
from helpers.batch_v2 import open_v2

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_state import BatchStateReader
from timerwheel.store.keys import CF_WHEEL
from timerwheel.store.segment_ids import format_id
from timerwheel.store.segments import Extras, encode_segment

SEQ = 5
DELIVER = [1_000, 1_000, 2_000, 3_000]  # index 0..3 of segment 5, all "orders" but 3
RANDOMS = bytes(range(40))


def ident(seq: int, index: int, deliver: list[int] = DELIVER) -> str:
    return format_id(deliver[index], seq, index, RANDOMS[10 * index : 10 * index + 10])


class Entries:
    def __init__(self, store) -> None:
        self.store = store
        self.reader = BatchStateReader(store.families)
        self.put(bk.CF_SEGMENTS, bk.segment_key(SEQ), segment(DELIVER))

    def put(self, family: str, key: bytes, value: bytes) -> None:
        self.store.write({family: {key: value}})

    def cursor(self, deliver_ms: int, seq: int, index: int) -> None:
        self.put(bk.CF_META, bk.META_FIRE_CURSOR, be.cursor_value(deliver_ms, seq, index))

    def override(self, index: int, **changed) -> None:
        self.put(
            bk.CF_OVERRIDES, bk.place_key(SEQ, index), be.override_value(be.Override(**changed))
        )

    def acked(self, ack_seq: int, at_ms: int, *indexes: int) -> None:
        value = be.refs_entry(at_ms, [SEQ] * len(indexes), list(indexes))
        self.put(bk.CF_ACKED, bk.acked_key(ack_seq), value)

    def ready(self, topic: str, chunk: int, at_ms: int, *indexes: int) -> None:
        value = be.refs_entry(at_ms, [SEQ] * len(indexes), list(indexes))
        self.put(bk.CF_READY, bk.chunk_key(topic, chunk), value)

    def get(self, index: int):
        return self.reader.get(ident(SEQ, index))


def segment(deliver: list[int], extras=None) -> bytes:
    return encode_segment(
        500, ("orders", "mail"), bytes([0, 0, 0, 1])[: len(deliver)], deliver,
        [b"b%d" % i for i in range(len(deliver))], RANDOMS[: 10 * len(deliver)], extras,
    )  # fmt: skip


@pytest.fixture
def entries(tmp_path):
    with open_v2(str(tmp_path / "v2")) as store:
        yield Entries(store)


def test_row_0_an_id_its_segment_does_not_own_finds_nothing(entries):
    assert entries.get(0) is not None
    real = ident(SEQ, 0)
    forged = real[:-1] + ("0" if real[-1] != "0" else "1")
    assert entries.reader.get(forged) is None
    assert entries.reader.get(format_id(999, SEQ, 0, RANDOMS[:10])) is None  # another time
    assert entries.reader.get(ident(SEQ + 1, 0)) is None  # no such segment (swept)
    assert entries.reader.get(format_id(1_000, SEQ, 9, RANDOMS[:10])) is None  # past its end
    with pytest.raises(ValueError, match="not a server-made id"):
        entries.reader.get("order-7")


def test_row_0_a_client_id_is_found_through_its_ids_entry(entries):
    entries.put(bk.CF_SEGMENTS, bk.segment_key(6), segment([4_000], {0: Extras(client_id="t/o-7")}))
    assert entries.reader.get_client_id("t/o-7") is None
    entries.put(bk.CF_IDS, bk.ids_key("t/o-7"), be.place_value(6, 0))
    found = entries.reader.get_client_id("t/o-7")
    assert (found.message_id, found.segment, found.state, found.deliver_at_ms) == (
        "t/o-7", 6, State.SCHEDULED, 4_000,
    )  # fmt: skip
    assert [m.message_id for m in entries.reader.scan(first_segment=6)] == ["t/o-7"]


def test_row_1_segstate_decides_over_every_other_entry(entries):
    entries.cursor(9_000, SEQ, 3)
    entries.override(0, cancelled_at_ms=7)
    entries.acked(1, 8, 0, 1)
    entries.ready("orders", 1, 6, 0, 1, 2)
    states = bytes([State.ACKED, State.CANCELLED, State.ACKED, State.ACKED])
    entries.put(bk.CF_SEGSTATE, bk.segment_key(SEQ), be.segstate_entry(states, [11, 12, 13, 14]))
    assert (entries.get(0).state, entries.get(0).acked_at_ms) == (State.ACKED, 11)
    assert (entries.get(1).state, entries.get(1).cancelled_at_ms) == (State.CANCELLED, 12)
    assert entries.get(2).fired_at_ms == 0  # a terminal message reports its terminal time
    assert entries.reader.list_scheduled("orders") == []


def test_row_1_a_segstate_byte_that_is_not_terminal_is_refused(entries):
    states = bytes([State.ACKED, State.FIRED, State.ACKED, State.ACKED])
    entries.put(bk.CF_SEGSTATE, bk.segment_key(SEQ), be.segstate_entry(states, [1, 2, 3, 4]))
    with pytest.raises(ValueError, match="segment 5 index 1: segstate holds"):
        entries.get(1)


def test_row_2_a_cancelling_override_wins_over_the_cursor_and_an_ack(entries):
    entries.override(0, cancelled_at_ms=70)  # scheduled, not yet fired
    assert (entries.get(0).state, entries.get(0).cancelled_at_ms) == (State.CANCELLED, 70)
    entries.cursor(9_000, SEQ, 3)
    entries.ready("orders", 1, 60, 1)
    entries.acked(1, 80, 1)
    entries.override(1, cancelled_at_ms=75)  # both terminal entries: the override reads
    assert (entries.get(1).state, entries.get(1).cancelled_at_ms) == (State.CANCELLED, 75)
    assert entries.get(1).acked_at_ms == entries.get(1).fired_at_ms == 0


def test_row_3_a_place_after_the_cursor_is_scheduled(entries):
    assert {entries.get(i).state for i in range(4)} == {State.SCHEDULED}  # no cursor
    entries.cursor(1_000, SEQ, 0)  # the cursor's order: deliver ms, then segment, then index
    assert [entries.get(i).state for i in range(4)] == [State.FIRED] + [State.SCHEDULED] * 3
    entries.cursor(1_000, SEQ - 1, 9)
    assert entries.get(0).state is State.SCHEDULED  # same ms, an earlier segment
    entries.cursor(1_000, SEQ + 1, 0)
    assert entries.get(1).state is State.FIRED  # same ms, a later segment


def test_row_3_an_override_moves_the_place_and_the_topic(entries):
    entries.cursor(2_500, SEQ, 0)
    entries.ready("orders", 1, 2_100, 0, 1, 2)
    entries.override(2, deliver_ms=2_600)  # a Nack's delay: scheduled again
    entries.override(3, deliver_ms=1_500, topic="orders")  # rescheduled earlier, fired
    moved, pulled = entries.get(2), entries.get(3)
    assert (moved.state, moved.deliver_at_ms, moved.fired_at_ms) == (State.SCHEDULED, 2_600, 0)
    assert (pulled.state, pulled.deliver_at_ms, pulled.topic) == (State.FIRED, 1_500, "orders")
    entries.cursor(2_600, SEQ, 2)
    entries.ready("orders", 2, 2_650, 2)
    assert (entries.get(2).state, entries.get(2).fired_at_ms) == (State.FIRED, 2_650)


def test_row_4_an_acked_entry_makes_it_acked_the_earliest_entry_s_time(entries):
    entries.cursor(9_000, SEQ, 3)
    entries.ready("orders", 1, 60, 0, 1)
    entries.acked(1, 80, 1)
    entries.acked(2, 90, 1, 0)
    assert (entries.get(1).state, entries.get(1).acked_at_ms) == (State.ACKED, 80)
    assert (entries.get(0).state, entries.get(0).acked_at_ms) == (State.ACKED, 90)
    assert entries.get(0).fired_at_ms == 0


def test_row_5_fired_at_is_the_newest_chunk_of_its_topic(entries):
    entries.cursor(9_000, SEQ, 3)
    entries.ready("orders", 1, 60, 0, 1)
    entries.ready("orders", 4, 95, 1)
    entries.ready("mail", 5, 99, 0)  # another topic's chunk does not name this message
    assert [(entries.get(i).state, entries.get(i).fired_at_ms) for i in (0, 1, 2)] == [
        (State.FIRED, 60), (State.FIRED, 95), (State.FIRED, 0),
    ]  # fmt: skip
    assert entries.get(3).topic == "mail"


def test_list_keeps_a_pair_only_while_it_is_the_message_s_place(entries):
    # Segment 5's pairs as sent: index 0, 1 in the second wheel, 2 and 3 in the minute's.
    entries.put(
        CF_WHEEL["second"], bk.wheel_entry_key(1_000, SEQ), be.wheel_entry([1_000, 1_000], [0, 1])
    )
    entries.put(
        CF_WHEEL["minute"], bk.wheel_entry_key(0, SEQ), be.wheel_entry([2_000, 3_000], [2, 3])
    )
    entries.override(0, cancelled_at_ms=10)  # its pair stays, the message does not list
    entries.override(1, deliver_ms=2_500)  # the old pair stays behind, the new one joins
    entries.put(CF_WHEEL["second"], bk.wheel_entry_key(2_000, SEQ), be.wheel_entry([2_500], [1]))
    listed = entries.reader.list_scheduled("orders")
    assert [(m.message_index, m.deliver_at_ms) for m in listed] == [(2, 2_000), (1, 2_500)]
    assert [m.message_index for m in entries.reader.list_scheduled("mail")] == [3]
    assert [m.message_index for m in entries.reader.list_scheduled("orders", 2_100, 2_600)] == [1]
    assert entries.reader.list_scheduled("orders", 0, 2_000) == []
    assert [m.message_index for m in entries.reader.list_scheduled("orders", limit=1)] == [2]
    assert [
        m.message_index for m in entries.reader.list_scheduled("orders", after=(2_000, SEQ, 2))
    ] == [1]
    assert entries.reader.count_scheduled("orders", 1_500, 3_000) == 2
    entries.cursor(2_000, SEQ, 2)
    assert [m.message_index for m in entries.reader.list_scheduled("orders")] == [1]
