"""timerwheel.delivery.first_deliveries: first attempts held for their Ack, pure: what an Ack takes,
what is handed over as events and when, and the bound on what is held."""

from __future__ import annotations

from timerwheel.delivery import first_deliveries
from timerwheel.delivery.first_deliveries import FirstDeliveries
from timerwheel.store import records

HOLD_MS = 5_000


def test_an_ack_takes_the_trailer_of_what_is_held_and_nothing_is_handed_over():
    held = FirstDeliveries(HOLD_MS)
    assert held.hold(["a", "b"], "worker-1", 1_000) == []
    trailer = records.first_delivery_trailer(1_000, "worker-1")
    assert held.take_for_ack(["b", "x", "a"]) == [trailer, b"", trailer]
    assert held.take_for_ack(["a"]) == [b""]  # taken once
    assert held.release_due(1_000 + HOLD_MS) == [] and len(held) == 0


def test_what_is_not_acked_within_the_hold_is_handed_over_with_its_time():
    held = FirstDeliveries(HOLD_MS)
    held.hold(["a", "b", "c"], "w1", 1_000)
    held.hold(["d"], "w2", 1_500)
    held.take_for_ack(["b"])
    assert held.release_due(1_000 + HOLD_MS - 1) == []
    assert held.release_due(1_000 + HOLD_MS) == [("w1", 1_000, ["a", "c"])]
    assert len(held) == 1
    assert held.take_for_ack(["a"]) == [b""]  # handed over: its Ack adds nothing
    assert held.release_all() == [("w2", 1_500, ["d"])]


def test_a_reader_or_another_first_attempt_has_the_held_one_handed_over_at_once():
    held = FirstDeliveries(HOLD_MS)
    held.hold(["a", "b"], "w", 1_000)
    assert held.release(["b", "zz"]) == [("w", 1_000, ["b"])]
    assert held.hold(["a"], "v", 1_200) == [("w", 1_000, ["a"])]  # delivered again
    assert held.take_for_ack(["a"]) == [records.first_delivery_trailer(1_200, "v")]


def test_an_ack_that_failed_gives_its_first_deliveries_back_as_events():
    held = FirstDeliveries(HOLD_MS)
    held.hold(["a", "b"], "w", 1_000)
    held.hold(["c"], "v", 1_100)
    trailers = held.take_for_ack(["a", "x", "c", "b"])
    assert held.give_back(["a", "x", "c", "b"], trailers) == [
        ("w", 1_000, ["a", "b"]), ("v", 1_100, ["c"]),
    ]  # fmt: skip


def test_past_its_bound_the_oldest_groups_are_handed_over(monkeypatch):
    monkeypatch.setattr(first_deliveries, "MAX_HELD", 3)
    held = FirstDeliveries(HOLD_MS)
    assert held.hold(["a", "b"], "w", 1_000) == []
    assert held.hold(["c", "d"], "w", 1_001) == [("w", 1_000, ["a", "b"])]
    assert len(held) == 2
