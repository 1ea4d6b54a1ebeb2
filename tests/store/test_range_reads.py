"""timerwheel.store.range_reads against real RocksDB: the same answer as a multi-get, from one walk
where the keys are neighbours, and a walk that gives up within its budget where they are
not."""

from __future__ import annotations

import shutil
import tempfile

import pytest
from helpers.budget import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from timerwheel.store.keys import CF_MESSAGES
from timerwheel.store.range_reads import MAX_SKIPPED_BYTES, MIN_GROUP, MIN_SKIPS, read_records
from timerwheel.store.rocks import RocksDatabase, RocksTuning

SERVER_IDS = [f"{1_700_000_000_000 + i:012X}{i * 7919:020X}".encode() for i in range(400)]
CLIENT_IDS = [f"order-{i}".encode() for i in range(40)]
DELETED = SERVER_IDS[100:110]  # written, then deleted: tombstones inside the run
BIG = [f"{1_800_000_000_000 + i:012X}big".encode() for i in range(8)]  # after SERVER_IDS


class CountingFamily:
    """A column family that counts what the reads ask of it."""

    def __init__(self, family) -> None:
        self.family = family
        self.multi_get_keys: list[bytes] = []
        self.items_read = 0

    def get(self, keys: list[bytes]):
        self.multi_get_keys.extend(keys)
        return self.family.get(keys)

    def items(self, **kwargs):
        for item in self.family.items(**kwargs):
            self.items_read += 1
            yield item


@pytest.fixture(scope="module")
def family():
    data_dir = tempfile.mkdtemp(prefix="tw-range-reads-")
    database = RocksDatabase(data_dir, RocksTuning(sync_writes=False))
    messages = database.families[CF_MESSAGES]
    try:
        for key in SERVER_IDS + CLIENT_IDS:
            messages[key] = b"record of " + key
        for key in BIG:
            messages[key] = b"x" * (MAX_SKIPPED_BYTES // 4)
        for key in DELETED:
            del messages[key]
        yield messages
    finally:
        del messages
        database.close()
        shutil.rmtree(data_dir)


def _expected(family, wanted: list[bytes]) -> dict[bytes, bytes | None]:
    return {key: family.get(key) for key in wanted}


def test_a_contiguous_run_is_read_by_one_walk_without_a_multi_get(family):
    wanted = SERVER_IDS[20:90]
    counting = CountingFamily(family)
    assert read_records(counting, wanted) == _expected(family, wanted)
    assert counting.multi_get_keys == []
    assert counting.items_read == len(wanted)


def test_deleted_and_unknown_keys_the_walk_passes_are_absent_without_a_multi_get(family):
    unknown = [key + b"-never-written" for key in (*SERVER_IDS[95:99], SERVER_IDS[119])]
    wanted = SERVER_IDS[90:120] + unknown  # DELETED lie inside, one unknown id is the last
    counting = CountingFamily(family)
    values = read_records(counting, wanted)
    assert values == _expected(family, wanted)
    assert all(values[key] is None for key in DELETED + unknown)
    assert counting.multi_get_keys == []


def _kept_by_walk(counting: CountingFamily, wanted: list[bytes]) -> int:
    return len(wanted) - len(counting.multi_get_keys)


def test_a_scattered_group_walks_until_it_drops_more_than_it_keeps(family):
    wanted = SERVER_IDS[::10]  # 40 keys, nine unwanted neighbours between each two
    counting = CountingFamily(family)
    assert read_records(counting, wanted) == _expected(family, wanted)
    kept = _kept_by_walk(counting, wanted)
    assert 0 < kept < len(wanted)  # the walk met the first few, a multi-get the rest
    assert counting.items_read <= 2 * kept + MIN_SKIPS + 1


def test_a_run_with_a_third_of_it_unwanted_is_still_one_walk(family):
    wanted = [key for index, key in enumerate(SERVER_IDS[:300]) if index % 3]  # cancelled
    counting = CountingFamily(family)
    assert read_records(counting, wanted) == _expected(family, wanted)
    assert counting.multi_get_keys == []


def test_ids_that_sort_far_apart_cost_a_bounded_walk(family):
    wanted = SERVER_IDS[:MIN_GROUP] + CLIENT_IDS[:MIN_GROUP]  # client ids sort after "0"-"F"
    counting = CountingFamily(family)
    assert read_records(counting, wanted) == _expected(family, wanted)
    assert counting.items_read <= 2 * MIN_GROUP + MIN_SKIPS + 1
    assert set(counting.multi_get_keys) == set(CLIENT_IDS[:MIN_GROUP])


def test_the_walk_stops_before_copying_many_unwanted_bytes(family):
    wanted = [*SERVER_IDS[-MIN_GROUP:], BIG[-1]]  # the other big values lie between
    counting = CountingFamily(family)
    assert read_records(counting, wanted) == _expected(family, wanted)
    assert counting.items_read <= MIN_GROUP + 5  # 4 big ones reach the byte budget
    assert counting.multi_get_keys == [BIG[-1]]


def test_a_small_group_is_one_multi_get(family):
    wanted = SERVER_IDS[: MIN_GROUP - 1]
    counting = CountingFamily(family)
    assert read_records(counting, wanted) == _expected(family, wanted)
    assert counting.items_read == 0
    assert counting.multi_get_keys == wanted


ALL_KEYS = SERVER_IDS + CLIENT_IDS + BIG
ANY_KEY = st.one_of(
    st.sampled_from(ALL_KEYS),
    st.sampled_from(ALL_KEYS).map(lambda key: key + b"\x00"),  # never written, sorts next
    st.binary(min_size=1, max_size=40),
)


@settings(max_examples=examples(150))
@given(wanted=st.lists(ANY_KEY, unique=True, max_size=200))
def test_the_answer_is_a_multi_get_s_for_any_group(family, wanted):
    assert read_records(family, wanted) == _expected(family, wanted)
