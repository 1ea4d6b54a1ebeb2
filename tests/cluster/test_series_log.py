"""Recurring series through the partition log (cluster/series_log.py, journal.py's `series`
entry, restore.py), against real RocksDB in virtual time: an owner's engine reports each
change of a series, the changes are folded as a takeover folds the log, and a second
engine restored from the fold continues the series where the first left it: the next
occurrence at its number and time, its un-acked occurrences fired again, its acked ones
and its pause kept."""

from __future__ import annotations

from helpers.engines import T0, engine_factory

from timerwheel.cluster import journal
from timerwheel.cluster.restore import restore_op
from timerwheel.cluster.series_log import PART_BYTES, _parts, entry_of
from timerwheel.engine.engine import Engine
from timerwheel.store.batch import SeriesChange
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import (
    IfExists,
    Repeat,
    SendOptions,
    SendSpec,
    When,
    WhenKind,
)
from timerwheel.wheels.settings import MINUTE_MS, SECOND_MS


def series(series_id: str, **repeat) -> SendSpec:
    options = SendOptions(max_attempts=5, repeat=Repeat(every_ms=MINUTE_MS, **repeat))
    return SendSpec(
        "jobs", b"tick", When(WhenKind.DELAY, MINUTE_MS), {"k": "v"}, series_id,
        IfExists.REJECT, options,
    )  # fmt: skip


def run(clock: VirtualClock, engine: Engine, ms: int) -> None:
    end_ms = clock.now_ms() + ms
    while clock.now_ms() < end_ms:
        clock.advance(min(SECOND_MS, end_ms - clock.now_ms()))
        engine.run_until_idle()


def fired_ids(engine: Engine) -> list[str]:
    return [f.timer.message_id for f in engine.fetch_fired("jobs", 0, 1000)]


class Log:
    """What an owner appends for its engine's series changes, and the other entries its
    API appends (acks), folded as a takeover folds them."""

    def __init__(self) -> None:
        self.entries: list[journal.Entry] = []

    def changes(self, changes: list[SeriesChange]) -> None:
        self.entries.extend(entry_of(change) for change in changes)

    def fold(self) -> journal.Fold:
        fold = journal.Fold()
        fold.apply(journal.decode(journal.encode(self.entries)))  # as the stream holds them
        return fold


def restored(make, clock: VirtualClock, fold: journal.Fold) -> Engine:
    engine = make()
    op = restore_op(list(fold.live.values()), clock.now_ms() - 60_000, engine.now_ms())
    future = engine.submit_sends(op)
    engine.run_until_idle()
    assert all(not r.existed for r in future.result())
    return engine


def test_a_restored_series_continues_with_no_occurrence_lost_or_doubled(tmp_path):
    clock = VirtualClock(T0)
    log = Log()
    with engine_factory(tmp_path / "owner", clock) as make_owner:
        owner = make_owner()
        owner.add_series_listener(log.changes)
        owner.send(series("nightly"))
        owner.send(series("paused"))
        run(clock, owner, 3 * MINUTE_MS)
        expected = [f"{s}#{n}" for s in ("nightly", "paused") for n in (1, 2, 3)]
        assert sorted(fired_ids(owner)) == expected
        acked = owner.ack("jobs", ["nightly#1", "nightly#2", "paused#1", "paused#2", "paused#3"])
        log.entries.append(journal.Acked(tuple(acked)))
        assert owner.pause_series("paused", True).changed
        fold = log.fold()

    # the owner is gone; a node restores the partition from the log and runs on
    clock.advance(10 * SECOND_MS)
    with engine_factory(tmp_path / "next", clock) as make_next:
        after = restored(make_next, clock, fold)
        assert fired_ids(after) == ["nightly#3"]  # un-acked: fired again, same id
        nightly = after.get("nightly")
        assert nightly.deliver_at_ms == T0 + 4 * MINUTE_MS  # its next time, not restarted
        run(clock, after, 2 * MINUTE_MS)
        assert fired_ids(after) == ["nightly#3", "nightly#4", "nightly#5"]
        properties = after.get("nightly#4").properties
        assert properties["timerwheel.series.occurrence"] == "4" and properties["k"] == "v"
        assert after.max_attempts("nightly#4") == 5  # its delivery options came with it
        assert not after.pause_series("paused", True).changed  # still paused


def test_a_finished_series_is_not_restored_and_its_last_occurrence_is(tmp_path):
    clock = VirtualClock(T0)
    log = Log()
    with engine_factory(tmp_path / "owner", clock) as make_owner:
        owner = make_owner()
        owner.add_series_listener(log.changes)
        owner.send(series("twice", max_count=2))
        run(clock, owner, 3 * MINUTE_MS)
        assert fired_ids(owner) == ["twice#1", "twice#2"]
        log.entries.append(journal.Acked(tuple(owner.ack("jobs", ["twice#1"]))))
        fold = log.fold()
    assert sorted(fold.live) == ["twice#2"]
    with engine_factory(tmp_path / "next", clock) as make_next:
        after = restored(make_next, clock, fold)
        run(clock, after, 3 * MINUTE_MS)
        assert fired_ids(after) == ["twice#2"]


def test_a_rescheduled_series_restores_at_its_new_time_with_its_number(tmp_path):
    clock = VirtualClock(T0)
    log = Log()
    with engine_factory(tmp_path / "owner", clock) as make_owner:
        owner = make_owner()
        owner.add_series_listener(log.changes)
        owner.send(series("s"))
        run(clock, owner, MINUTE_MS)
        log.entries.append(journal.Acked(tuple(owner.ack("jobs", ["s#1"]))))
        moved = owner.reschedule("s", When(WhenKind.DELAY, 30 * MINUTE_MS))
        log.entries.append(journal.Rescheduled("s", moved))  # as the API logs it too
        fold = log.fold()
    with engine_factory(tmp_path / "next", clock) as make_next:
        after = restored(make_next, clock, fold)
        assert after.get("s").deliver_at_ms == moved
        run(clock, after, 31 * MINUTE_MS)
        assert fired_ids(after)[0] == "s#2"


def test_many_series_changes_of_one_commit_go_in_records_of_a_bounded_size():
    body = b"x" * (PART_BYTES // 3)
    entries = [
        journal.SeriesState(f"s{i}", journal.Sent(f"s{i}", "t", body, {}, 1)) for i in range(10)
    ]
    entries.insert(3, journal.SeriesState("gone", None, ((1, 1),)))
    parts = _parts(entries)
    assert [e for part in parts for e in part] == entries  # all of them, in order
    assert all(sum(map(journal.body_bytes, part)) <= PART_BYTES for part in parts)
    assert len(parts) == 4
