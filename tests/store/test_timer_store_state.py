"""The scheduler's state in the store's meta family: it survives a reopen with the data;
each commit stages only the values that changed since the last one (a finished cascade's
pending key deleted once); after a failed commit or a reopen it is staged whole, since
the store cannot tell what of a failed batch reached the disk.

Real RocksDB in a temp dir; each test stages into a batch, commits, and reads back."""

from __future__ import annotations

from dataclasses import replace

import pytest
from helpers.timer_store import T0, commit, schedule, timer

from timerwheel.store import keys
from timerwheel.wheels.scheduler import CascadeState, SchedulerState, TimerKey


def test_scheduler_state_and_data_survive_reopen(open_store):
    store = open_store()
    cascades = (CascadeState(T0 + 60_000, TimerKey(T0 + 1, "z")), CascadeState(T0 + 3_600_000))
    state = SchedulerState(T0, cascades, fire_from=TimerKey(T0 - 5, "a"), fire_seq=42)
    assert store.load_state() is None

    def stage(batch):
        schedule(store, batch, timer("keep", T0 + 9), "hour")
        store.stage_state(batch, state)

    commit(store, stage)
    store.close()
    reopened = open_store()
    assert reopened.load_state() == state
    assert reopened.get("keep") == timer("keep", T0 + 9)
    # A finished cascade clears its pending key.
    done = SchedulerState(
        T0, (CascadeState(T0 + 60_000), CascadeState(T0 + 3_600_000)), state.fire_from, 42
    )
    commit(reopened, lambda b: reopened.stage_state(b, done))
    assert reopened.load_state() == done


def test_state_stages_only_the_values_that_changed_since_the_last_commit(open_store):
    store = open_store()
    cascades = (CascadeState(T0 + 60_000, TimerKey(T0 + 1, "z")), CascadeState(T0 + 3_600_000))
    first = SchedulerState(T0, cascades, fire_from=TimerKey(T0 - 5, "a"), fire_seq=42)
    whole = commit(store, lambda b: store.stage_state(b, first))
    assert len(whole.writes[keys.CF_META]) == 8  # the first commit of a store writes them all

    ticked = replace(first, now_ms=T0 + 4, fire_from=TimerKey(T0 + 4, "b"))
    batch = commit(store, lambda b: store.stage_state(b, ticked))
    assert set(batch.writes[keys.CF_META]) == {keys.META_NOW_MS, keys.META_FIRE_FROM}
    same = commit(store, lambda b: store.stage_state(b, ticked))
    assert same.writes[keys.CF_META] == {}

    # A cascade that finishes deletes its pending key once, not at every commit after.
    finished = replace(ticked, cascades=(CascadeState(T0 + 60_000), cascades[1]))
    batch = commit(store, lambda b: store.stage_state(b, finished))
    assert batch.writes[keys.CF_META] == {keys.meta_pending("second"): None}
    assert commit(store, lambda b: store.stage_state(b, finished)).writes[keys.CF_META] == {}

    store.close()
    assert open_store().load_state() == finished  # what was left out was on disk already


def test_state_is_staged_whole_after_a_failed_commit_and_after_a_reopen(open_store, monkeypatch):
    store = open_store()
    cascades = (CascadeState(T0 + 60_000), CascadeState(T0 + 3_600_000))
    state = SchedulerState(T0, cascades, fire_from=TimerKey(T0, ""), fire_seq=1)
    commit(store, lambda b: store.stage_state(b, state))

    def refused(write_batch, sync):
        raise OSError("refused")

    with monkeypatch.context() as patched:
        patched.setattr(store.database, "write", refused)
        with pytest.raises(OSError):
            commit(store, lambda b: store.stage_state(b, replace(state, now_ms=T0 + 1)))
    # The store cannot tell what of a failed batch reached the disk: all of it again.
    again = commit(store, lambda b: store.stage_state(b, replace(state, now_ms=T0 + 2)))
    assert len(again.writes[keys.CF_META]) == 8

    store.reopen()
    after_reopen = commit(store, lambda b: store.stage_state(b, replace(state, now_ms=T0 + 3)))
    assert len(after_reopen.writes[keys.CF_META]) == 8
    assert store.load_state() == replace(state, now_ms=T0 + 3)
