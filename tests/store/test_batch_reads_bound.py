"""The two version-2 readers decision 0014's step 4 left open, against real RocksDB: a
Get of a FIRED message reports its fire position (`ready_seq`), and List walks the three
wheels in key order, reading a bounded number of wheel entries a call
(timerwheel.store.batch_reads)."""

from __future__ import annotations

import random
from collections import Counter

import pytest
from helpers.batch_v2 import Writer, open_v2

from timerwheel.common import State
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_reads import READY_PLACE_BITS, BatchTimerReads, ready_seq
from timerwheel.store.batch_state import BatchStateReader
from timerwheel.store.keys import CF_WHEEL
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_send import NewSends

NOW = 1_200_000  # a whole minute
END = 2**62
_WHEEL_FAMILIES = set(CF_WHEEL.values())


class _Counted:
    """A store's families with every wheel entry read counted (point reads and the items
    a range walk yields): what a List call costs in wheel entries."""

    def __init__(self, families) -> None:
        self._families, self.read = families, 0

    def __getitem__(self, name: str):
        family = self._families[name]
        return _CountedFamily(self, family) if name in _WHEEL_FAMILIES else family


class _CountedFamily:
    def __init__(self, counter: _Counted, family) -> None:
        self._counter, self._family = counter, family

    def get(self, key: bytes):
        self._counter.read += 1
        return self._family.get(key)

    def items(self, **kwargs):
        for item in self._family.items(**kwargs):
            self._counter.read += 1
            yield item


def send(store, deliver: list[int], wheels: list[str], topics: list[str]) -> list[str]:
    bodies = [b"body %d" % i for i in range(len(deliver))]
    return store.opened.send(NewSends(topics, bodies, deliver, wheels), NOW, sync=False).ids


def place_of(message_id: str, deliver_ms: int) -> tuple[int, int, int]:
    parsed = parse_id(message_id)
    return deliver_ms, parsed.segment, parsed.message_index


def pages(reads, topic: str, from_ms: int, to_ms: int, limit: int, budget: int, between=None):
    """Every page of a listing, through its continuations: [(timers, entries read)]."""
    out, after = [], None
    while True:
        before = reads.counted.read
        page = reads.list_pending(topic, from_ms, to_ms, limit, after, scan_budget=budget)
        out.append((page.timers, reads.counted.read - before))
        assert len(page.timers) <= limit
        if page.next_after is None:
            return out
        assert after is None or page.next_after > after  # each call moves on
        after = page.next_after
        if between is not None:
            between(len(out))
        assert len(out) < 10_000, "a listing that does not end"


def counted_reads(store) -> BatchTimerReads:
    counted = _Counted(store.families)
    reads = BatchTimerReads(counted)  # type: ignore[arg-type]
    reads.counted = counted  # type: ignore[attr-defined]
    return reads


def every(store, family: str) -> list[tuple[bytes, bytes]]:
    return store.items(family, b"", b"\xff" * 32)


def entries_a_slot(store) -> int:
    """The most wheel entries (segments) any one slot of any wheel holds."""
    most = 0
    for family in CF_WHEEL.values():
        slots = Counter(bk.decode_wheel_entry_key(k)[0] for k, _ in every(store, family))
        most = max(most, *slots.values(), 0)
    return most


# == Get: the fire position ===============================================================


def test_a_fired_messages_ready_seq_grows_in_fire_order_and_terminal_ones_report_none(
    tmp_path,
):
    with open_v2(str(tmp_path / "v2"), segment_max=4) as store:
        writer, reads = Writer(store), store.opened.reads
        ids = writer.send([("orders", 100 * (i + 1)) for i in range(6)], NOW)
        mail = writer.send([("mail", 150), ("mail", 650)], NOW)
        assert reads.get(ids[0]).ready_seq == 0  # SCHEDULED
        writer.fire(NOW + 300, limit=100)  # orders 0..2 and mail 0: a chunk a topic
        writer.fire(NOW + 700, limit=100)  # orders 3..5 and mail 1
        seqs = [reads.get(i).ready_seq for i in ids]
        assert all(reads.get(i).state is State.FIRED for i in ids + mail)
        assert seqs == sorted(seqs) and len(set(seqs)) == len(seqs)  # fire order, distinct
        chunks = [s >> READY_PLACE_BITS for s in seqs]
        assert chunks[:3] == [chunks[0]] * 3 and chunks[3:] == [chunks[3]] * 3
        assert chunks[3] > chunks[0]  # two chunks of "orders"
        assert [s & ((1 << READY_PLACE_BITS) - 1) for s in seqs] == [0, 1, 2, 0, 1, 2]
        ready_keys = [k for k, _ in every(store, bk.CF_READY) if k.startswith(b"orders")]
        assert sorted({bk.chunk_seq(k) for k in ready_keys}) == sorted(set(chunks))
        mail_seqs = [reads.get(i).ready_seq for i in mail]
        assert not set(mail_seqs) & set(seqs)  # unique in the store, as version 1's fire seq
        assert mail_seqs == sorted(mail_seqs)

        writer.ack([ids[1]], NOW + 800)
        writer.cancel(ids[4], NOW + 800)  # a purge of a FIRED message
        acked, cancelled = reads.get(ids[1]), reads.get(ids[4])
        assert (acked.state, acked.ready_seq, acked.fired_at_ms) == (State.ACKED, 0, 0)
        assert (cancelled.state, cancelled.ready_seq) == (State.CANCELLED, 0)
        assert [reads.get(i).ready_seq for i in ids[:1] + ids[2:4] + ids[5:]] == [
            seqs[0], seqs[2], seqs[3], seqs[5],
        ]  # fmt: skip

        writer.move(ids[0], NOW + 1_500, 500)  # a Nack's delay: SCHEDULED again
        assert (reads.get(ids[0]).state, reads.get(ids[0]).ready_seq) == (State.SCHEDULED, 0)
        writer.fire(NOW + 2_000, limit=100)
        again = reads.get(ids[0])
        assert again.state is State.FIRED
        assert again.ready_seq > max(seqs + mail_seqs)  # the newest chunk naming it
        assert again.fired_at_ms == NOW + 2_000


def test_a_place_beyond_the_bits_of_a_chunk_is_refused():
    assert ready_seq(3, 5) == 3 << READY_PLACE_BITS | 5
    with pytest.raises(ValueError, match="place"):
        ready_seq(3, 1 << READY_PLACE_BITS)


# == List: the bounded walk ===============================================================


def mixed_range(store, rng: random.Random, calls: int = 40, each: int = 12):
    """Sends over about three hours into all three wheels, several topics, many small
    segments; {id: (deliver ms, topic)}."""
    sent: dict[str, tuple[int, str]] = {}
    for _ in range(calls):
        deliver = [NOW + rng.randrange(0, 3 * 3_600_000) for _ in range(each)]
        wheels = [rng.choice(("second", "minute", "hour")) for _ in deliver]
        topics = [rng.choice(("orders", "orders", "mail")) for _ in deliver]
        made = send(store, deliver, wheels, topics)
        for message_id, d, t in zip(made, deliver, topics, strict=True):
            sent[message_id] = (d, t)
    return sent


def expected(sent, topic: str, from_ms: int, to_ms: int) -> list[str]:
    mine = [(place_of(i, d), i) for i, (d, t) in sent.items() if t == topic]
    return [i for p, i in sorted(mine) if from_ms <= p[0] < to_ms]


@pytest.mark.parametrize(("limit", "budget"), [(7, 1_000), (7, 4), (1, 1), (50, 16)])
def test_pages_cover_the_range_once_in_place_order(tmp_path, limit, budget):
    with open_v2(str(tmp_path / "v2"), segment_max=4) as store:
        sent = mixed_range(store, random.Random(limit * 100 + budget))
        reads = counted_reads(store)
        for topic, lo, hi in (("orders", 0, END), ("mail", NOW + 1_800_000, NOW + 7_300_000)):
            listed = [t for timers, _ in pages(reads, topic, lo, hi, limit, budget)
                      for t in timers]  # fmt: skip
            assert [t.message_id for t in listed] == expected(sent, topic, lo, hi)
            assert all(t.state is State.SCHEDULED and t.topic == topic for t in listed)
            assert [t.message_id for t in listed] == [
                m.message_id for m in BatchStateReader(store.families).list_scheduled(topic, lo, hi)
            ]  # the join's own, unbounded walk agrees


def test_a_pages_entries_read_do_not_grow_with_its_depth(tmp_path):
    """300 seconds of one segment each (4 messages), one topic: a page of 8 settles in
    about 2 entries, wherever it starts; the unbounded walk reads every entry a page."""
    with open_v2(str(tmp_path / "v2"), segment_max=4) as store:
        for second in range(300):
            deliver = [NOW + 1_000 * second + 10 * i for i in range(4)]
            send(store, deliver, ["second"] * 4, ["orders"] * 4)
        reads = counted_reads(store)
        listing = pages(reads, "orders", 0, END, 8, 1_000)
        assert sum(len(timers) for timers, _ in listing) == 1_200
        per_page = [read for _, read in listing]
        assert len(per_page) == 150
        assert max(per_page) <= 8 // 4 + 2  # the entries settled, the next, the one re-read
        assert max(per_page[-20:]) <= max(per_page[:20])  # deep pages cost as the first

        counted = _Counted(store.families)
        BatchStateReader(counted).list_scheduled("orders", 0, END, 8)  # type: ignore[arg-type]
        assert counted.read == 300  # what each page read before: the whole range


def test_a_sparse_topic_ends_pages_at_the_budget_with_a_continuation(tmp_path):
    """800 messages over three hours in the second and minute wheels, and one of another
    topic at the end: each call reads at most its budget, plus the entries whose slot
    holds the previous continuation's time and the merge's look-ahead of each wheel."""
    rng = random.Random(3)
    with open_v2(str(tmp_path / "v2"), segment_max=4) as store:
        for _ in range(200):
            deliver = [NOW + rng.randrange(0, 3 * 3_600_000) for _ in range(4)]
            send(store, deliver, [rng.choice(("second", "minute")) for _ in deliver],
                 ["orders"] * 4)  # fmt: skip
        rare = send(store, [NOW + 3 * 3_600_000 + 5], ["minute"], ["rare"])[0]
        reads = counted_reads(store)
        budget, slack = 10, entries_a_slot(store) * len(CF_WHEEL) + len(CF_WHEEL) + 1
        listing = pages(reads, "rare", 0, END, 5, budget)
        assert [t.message_id for timers, _ in listing for t in timers] == [rare]
        assert len(listing) > 20  # partial pages, all but the last empty
        assert all(not timers for timers, _ in listing[:-1])
        assert max(read for _, read in listing) <= budget + slack
        total = sum(len(every(store, f)) for f in CF_WHEEL.values())
        assert total > 10 * (budget + slack)  # the bound is far below the range's entries


def test_overrides_between_pages_list_each_message_at_most_once(tmp_path):
    with open_v2(str(tmp_path / "v2"), segment_max=4) as store:
        writer = Writer(store)
        deliver = [NOW + 5_000 + 997 * i for i in range(60)]
        ids = send(store, deliver, ["second"] * 60, ["orders"] * 60)
        reads = counted_reads(store)
        cancelled, later, earlier = ids[30], ids[35], ids[40]

        def overrides(page_number: int) -> None:
            if page_number == 2:  # full pages of 10: ids[:20] are listed
                writer.cancel(cancelled, NOW)
                writer.move(later, deliver[-1] + 500, 500)  # to the end of the range
                writer.move(earlier, deliver[3] + 1, 500)  # behind the continuation

        listing = pages(reads, "orders", 0, END, 10, 1_000, between=overrides)
        listed = [t.message_id for timers, _ in listing for t in timers]
        assert len(listed) == len(set(listed))  # at most once
        assert cancelled not in listed and earlier not in listed
        assert listed[-1] == later and listed.count(later) == 1  # at its new place only
        assert set(listed) == set(ids) - {cancelled, earlier}
        places = [(reads.get(i).deliver_at_ms, *place_of(i, 0)[1:]) for i in listed]
        assert places == sorted(places)


def test_a_pair_in_two_wheels_entries_is_listed_once(tmp_path):
    """Moved away and back, a message's pair is in its first wheel's entry and in the
    entry of the wheel it came back in, both at its place: one listing."""
    with open_v2(str(tmp_path / "v2"), segment_max=4) as store:
        writer = Writer(store)
        at = NOW + 90_000
        ids = send(store, [at, at + 10], ["minute", "minute"], ["orders"] * 2)
        writer.move(ids[0], at + 30_000, 500)
        writer.move(ids[0], at, 500)  # back, now in the second wheel
        second = store.families[CF_WHEEL["second"]].keys()
        assert any(bk.decode_wheel_entry_key(k)[0] == at - at % 1_000 for k in second)
        reads = counted_reads(store)
        for limit in (1, 10):
            listing = pages(reads, "orders", 0, END, limit, 1_000)
            assert [t.message_id for timers, _ in listing for t in timers] == ids
