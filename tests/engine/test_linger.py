"""`timerwheel.engine.linger`: when the writer must wake for a queued op that may linger (delivery
trace events), as verdicts on times passed in."""

from __future__ import annotations

from timerwheel.engine.linger import Lingering

NOW = 1_700_000_000_000


def test_nothing_queued_wakes_nobody_and_leaves_the_wake_time_alone():
    lingering = Lingering()
    assert lingering.due_ms is None
    assert not lingering.wakes(asleep_until_ms=NOW + 250)
    assert lingering.sleep_until_ms(NOW + 250) == NOW + 250


def test_a_writer_that_wakes_before_the_deadline_is_left_asleep():
    lingering = Lingering()
    lingering.queued(NOW, linger_ms=10)
    assert lingering.due_ms == NOW + 10
    assert not lingering.wakes(asleep_until_ms=NOW + 1)  # its next fire is sooner
    assert not lingering.wakes(asleep_until_ms=NOW + 10)  # on the deadline: in time
    assert not lingering.wakes(asleep_until_ms=None)  # awake: it sees the queue itself


def test_a_writer_asleep_past_the_deadline_is_woken():
    lingering = Lingering()
    lingering.queued(NOW, linger_ms=10)
    assert lingering.wakes(asleep_until_ms=NOW + 11)
    assert lingering.wakes(asleep_until_ms=NOW + 250)


def test_the_writer_sleeps_no_later_than_the_deadline():
    lingering = Lingering()
    lingering.queued(NOW, linger_ms=10)
    assert lingering.sleep_until_ms(NOW + 250) == NOW + 10
    assert lingering.sleep_until_ms(NOW + 3) == NOW + 3  # a sooner fire stays sooner


def test_the_earliest_deadline_holds_until_the_queue_is_emptied():
    lingering = Lingering()
    lingering.queued(NOW, linger_ms=10)
    lingering.queued(NOW + 5, linger_ms=10)  # later: the first deadline stays
    assert lingering.due_ms == NOW + 10
    lingering.queued(NOW + 6, linger_ms=2)  # a shorter linger brings it forward
    assert lingering.due_ms == NOW + 8
    lingering.taken(queue_empty=False)  # a bounded group left ops queued
    assert lingering.due_ms == NOW + 8
    lingering.taken(queue_empty=True)
    assert lingering.due_ms is None
    assert not lingering.wakes(asleep_until_ms=NOW + 250)
