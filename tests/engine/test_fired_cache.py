"""The fired-record cache: answers only when it is complete above the reader's cursor."""

from timerwheel.common import State
from timerwheel.engine.fired_cache import ENTRY_OVERHEAD_BYTES, FiredCache, entries_bytes
from timerwheel.store import records
from timerwheel.wheels.domain import Timer, When, WhenKind


def entry(seq: int, topic: str = "t") -> tuple[int, bytes, bytes]:
    timer = Timer(
        message_id=f"m{seq}", topic=topic, body=b"b", properties={}, deliver_at_ms=seq,
        created_at_ms=0, state=State.FIRED, when=When(WhenKind.DELAY, 0), ready_seq=seq,
    )  # fmt: skip
    return seq, f"m{seq}".encode(), records.encode_timer(timer)


def read(cache: FiredCache, topic: str, after_seq: int, limit: int, max_bytes: int = 0):
    """The cache's answer, decoded as the engine decodes it; None when it cannot answer."""
    rows = cache.read_raw(topic, after_seq, limit, max_bytes)
    return None if rows is None else records.decode_fired(rows)


def seqs(fired) -> list[int]:
    return [f.seq for f in fired]


def test_serves_what_was_fired_since_start_in_order():
    cache = FiredCache(start_seq=10, max_bytes=10**9)
    cache.add({"t": [entry(11), entry(13)], "u": [entry(12, "u")]})
    assert seqs(read(cache, "t", 10, 10)) == [11, 13]
    assert [f.timer.message_id for f in read(cache, "u", 10, 10)] == ["m12"]
    assert read(cache, "t", 11, 1)[0].timer.topic == "t"


def test_cursors_before_the_start_go_to_the_store():
    cache = FiredCache(start_seq=10, max_bytes=10**9)
    cache.add({"t": [entry(11)]})
    assert read(cache, "t", 9, 10) is None
    assert read(cache, "never-fired", 3, 10) is None
    assert read(cache, "never-fired", 10, 10) == []


def test_a_read_drops_what_the_reader_holds_and_earlier_cursors_fall_back():
    cache = FiredCache(start_seq=0, max_bytes=10**9)
    cache.add({"t": [entry(1), entry(2), entry(3)]})
    assert seqs(read(cache, "t", 2, 10)) == [3]
    assert read(cache, "t", 0, 10) is None  # 1 and 2 were dropped: not complete from 0
    assert seqs(read(cache, "t", 2, 10)) == [3]


def test_over_the_bound_the_largest_topic_is_dropped_to_the_store():
    cache = FiredCache(start_seq=0, max_bytes=3 * entries_bytes([entry(1, "big")]))
    cache.add(
        {"big": [entry(1, "big"), entry(2, "big"), entry(3, "big")], "small": [entry(4, "small")]}
    )
    assert read(cache, "big", 0, 10) is None
    assert seqs(read(cache, "small", 0, 10)) == [4]
    cache.add({"big": [entry(5, "big")]})
    assert seqs(read(cache, "big", 3, 10)) == [5]


def test_over_the_byte_bound_the_largest_topic_by_bytes_is_dropped():
    """Few entries, big records: the byte bound, not the count, evicts."""
    big = [entry(seq, "big") for seq in (1, 2)]
    big = [(seq, mid, raw + b"x" * 10_000) for seq, mid, raw in big]  # same record, padded
    small = [entry(seq, "small") for seq in (3, 4, 5)]
    bound = entries_bytes(small) + entries_bytes(big[:1]) + 1
    cache = FiredCache(start_seq=0, max_bytes=bound)
    cache.add({"small": small})
    cache.add({"big": big})
    assert read(cache, "big", 0, 10) is None  # two padded records went over: dropped
    assert seqs(read(cache, "small", 0, 10)) == [3, 4, 5]  # more entries, fewer bytes: kept
    assert cache.bytes == entries_bytes(small)


def test_bytes_are_released_as_readers_move_on():
    cache = FiredCache(start_seq=0, max_bytes=10**9)
    entries = [entry(1), entry(2), entry(3)]
    cache.add({"t": entries})
    assert cache.bytes == entries_bytes(entries)
    read(cache, "t", 2, 10)
    assert cache.bytes == entries_bytes(entries[2:3])


def test_retired_entries_are_never_served_again_even_to_a_reader_starting_over():
    """A dispatcher freed while idle (or a restarted delivery process) reads from 0
    again: what was acked or dead-lettered meanwhile must not come back."""
    cache = FiredCache(start_seq=0, max_bytes=10**9)
    cache.add({"t": [entry(1), entry(2), entry(3), entry(4)]})
    assert seqs(read(cache, "t", 0, 10)) == [1, 2, 3, 4]
    cache.add({}, {"t": [1, 3], "u": [9]})  # acked; "u" has nothing cached: ignored
    assert seqs(read(cache, "t", 0, 10)) == [2, 4]
    assert seqs(read(cache, "t", 0, 1)) == [2]  # the limit counts live entries only
    cache.add({"t": [entry(5)]}, {"t": [4]})
    assert seqs(read(cache, "t", 0, 2)) == [2, 5]
    assert seqs(read(cache, "t", 2, 10)) == [5]  # dropped below the cursor, sets and all
    assert read(cache, "u", 0, 10) == []


def test_a_read_stops_at_its_byte_budget_with_one_entry_at_least():
    cache = FiredCache(start_seq=0, max_bytes=10**9)
    cache.add({"t": [entry(1), entry(2), entry(3)]})
    size = len(entry(1)[2])
    assert seqs(read(cache, "t", 0, 10, max_bytes=2 * size)) == [1, 2]
    assert seqs(read(cache, "t", 0, 10, max_bytes=2 * size - 1)) == [1, 2]  # reaches it
    assert seqs(read(cache, "t", 0, 10, max_bytes=1)) == [1]  # one at least
    assert seqs(read(cache, "t", 0, 10)) == [1, 2, 3]  # 0: no byte budget


def test_an_entry_is_charged_its_id_and_record_and_the_overhead():
    entries = [entry(1), entry(22, "a-longer-topic")]
    charged = [len(e[1]) + len(e[2]) + ENTRY_OVERHEAD_BYTES for e in entries]
    assert entries_bytes(entries) == sum(charged)
    assert entries_bytes([]) == 0
