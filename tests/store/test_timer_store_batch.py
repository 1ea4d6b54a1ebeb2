"""What a staged batch is to the store: its reads through the batch see what was staged
before the commit; a send and a cancel of one timer in one batch leave the cancel; and a
commit equals applying every put and delete in the order staged, over what was there (a
hypothesis search against a dictionary, on real RocksDB)."""

from __future__ import annotations

import tempfile

from helpers.budget import examples
from helpers.timer_store import T0, schedule, timer, wheel_ids
from hypothesis import given, settings
from hypothesis import strategies as st

from timerwheel.common import State
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.store.rocks import RocksDatabase, RocksTuning
from timerwheel.store.timer_store import TimerStore


def test_overlay_shows_what_the_batch_staged(open_store):
    store = open_store()
    batch = StagedBatch()
    schedule(store, batch, timer("o", T0), "second")
    assert store.lookup(batch, b"o") is not None
    assert store.get_record("o") is None  # not committed yet
    store.commit(batch)
    assert store.get_record("o") is not None


def test_a_send_then_cancel_in_one_batch_leaves_the_cancel(open_store):
    store = open_store()
    batch = StagedBatch()
    schedule(store, batch, timer("c", T0 + 90_000), "minute")
    raw = store.lookup(batch, b"c")
    store.stage_cancel(batch, "c", raw, ["minute"], T0, T0 + 1_000)
    store.commit(batch)
    assert store.get("c").state is State.CANCELLED
    assert wheel_ids(store, "minute") == []


_writes = st.lists(
    st.tuples(
        st.sampled_from([keys.CF_WHEEL["hour"], keys.CF_META]),
        st.binary(min_size=1, max_size=3),
        st.one_of(st.none(), st.binary(max_size=4)),  # None: delete
    ),
    max_size=40,
)


@settings(max_examples=examples(40), deadline=None)
@given(committed=_writes, staged=_writes)
def test_a_batch_commits_as_if_its_writes_were_applied_in_order(committed, staged):
    """A batch keeps each key's last write and commits each family sorted: the outcome
    must equal applying every put and delete in the order staged, over what was there."""
    model: dict[tuple[str, bytes], bytes] = {}
    with tempfile.TemporaryDirectory() as data_dir:
        store = TimerStore(RocksDatabase(data_dir, RocksTuning(sync_writes=False)))
        try:
            for writes in (committed, staged):
                batch = StagedBatch()
                for family, key, value in writes:
                    batch.writes[family][key] = value
                    if value is None:
                        model.pop((family, key), None)
                    else:
                        model[(family, key)] = value
                store.commit(batch)
            stored = {
                (family, key): value
                for family in (keys.CF_WHEEL["hour"], keys.CF_META)
                for key, value in store.database.families[family].items()
            }
        finally:
            store.close()
    assert stored == model
