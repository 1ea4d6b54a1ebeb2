"""Bulk cancel, purge and redrive in the engine, over real RocksDB in virtual time:
what each selects (topic, series, id prefix, time range), its pages, its counts, what it
leaves alone, and that a refused call changes nothing."""

from __future__ import annotations

import pytest
from helpers.engines import T0, engine_factory, wheel_count

from timerwheel.common import State
from timerwheel.engine import bulk_calls as engine_module
from timerwheel.engine.bulk_ops import BulkCancelOp
from timerwheel.engine.commit_counts import commit_counts
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import InvalidArgument, Repeat, SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.settings import DAY_MS, HOUR_MS, MINUTE_MS
from timerwheel.wheels.trace import TraceKind


@pytest.fixture
def clock():
    return VirtualClock(T0)


@pytest.fixture
def engine(tmp_path, clock):
    with engine_factory(tmp_path / "data", clock) as make:
        yield make()


def send(engine, ms, topic="orders", message_id="", **options):
    spec = SendSpec(
        topic, b"body", When(WhenKind.DELAY, ms), message_id=message_id,
        options=SendOptions(**options) if options else None,
    )  # fmt: skip
    return engine.send(spec).message_id


def states(engine, ids):
    return [engine.get(i).state for i in ids]


def fired_ids(engine, topic):
    return [f.timer.message_id for f in engine.fetch_fired(topic, 0, 100)]


def test_cancel_by_topic_takes_every_wheel_and_leaves_other_topics(engine):
    ours = [send(engine, ms) for ms in (2_000, 10 * MINUTE_MS, 3 * HOUR_MS, 2 * DAY_MS)]
    theirs = send(engine, 10 * MINUTE_MS, topic="payments")
    result = engine.bulk_cancel(TimerFilter(topic="orders"))
    assert (result.cancelled, result.purged, result.next_token) == (4, 0, "")
    assert states(engine, ours) == [State.CANCELLED] * 4
    assert engine.get(theirs).state is State.SCHEDULED
    assert engine.count("orders") == (0, 0, 0)
    assert engine.count("payments") == (1, 0, 0)
    assert wheel_count(engine, "minute") == 1  # only payments' is left
    again = engine.bulk_cancel(TimerFilter(topic="orders"))
    assert (again.cancelled, again.next_token) == (0, "")


def test_pages_are_bounded_by_the_limit_and_continue_where_they_stopped(engine):
    ids = [send(engine, 60_000 * (i + 1)) for i in range(5)]
    seen, token, calls = 0, "", 0
    while True:
        result = engine.bulk_cancel(TimerFilter(topic="orders"), limit=2, page_token=token)
        assert result.cancelled <= 2
        seen += result.cancelled
        calls += 1
        token = result.next_token
        if not token:
            break
    assert (seen, calls) == (5, 3)
    assert states(engine, ids) == [State.CANCELLED] * 5


def test_a_walk_misses_no_timer_that_cascades_between_its_pages(engine, clock):
    first, moving, far = (send(engine, ms) for ms in (45 * MINUTE_MS, 49 * MINUTE_MS + 30_000,
                                                       100 * MINUTE_MS))  # fmt: skip
    assert {engine.get(i).wheel for i in (first, moving, far)} == {"hour"}
    page = engine.bulk_cancel(TimerFilter(topic="orders"), limit=1)
    assert page.cancelled == 1 and engine.get(first).state is State.CANCELLED
    clock.advance(49 * MINUTE_MS)  # its hour cascades to minutes, its minute to seconds
    engine.run_until_idle()
    assert engine.get(moving).wheel == "second"
    page = engine.bulk_cancel(TimerFilter(topic="orders"), limit=1, page_token=page.next_token)
    assert page.cancelled == 1 and engine.get(moving).state is State.CANCELLED
    page = engine.bulk_cancel(TimerFilter(topic="orders"), limit=1, page_token=page.next_token)
    assert (page.cancelled, page.next_token) == (1, "")
    assert engine.get(far).state is State.CANCELLED
    assert sum(wheel_count(engine, w) for w in ("hour", "minute", "second")) == 0


def test_a_call_that_takes_the_last_match_says_none_remain(engine):
    ids = [send(engine, MINUTE_MS), send(engine, HOUR_MS)]
    send(engine, MINUTE_MS, topic="other")  # examined after the limit: not a match
    result = engine.bulk_cancel(TimerFilter(topic="orders"), limit=2)
    assert (result.cancelled, result.next_token) == (2, "")
    assert states(engine, ids) == [State.CANCELLED] * 2


def test_a_time_range_selects_by_deliver_time(engine, clock):
    early = send(engine, 5 * MINUTE_MS)
    inside = [send(engine, 20 * MINUTE_MS), send(engine, 2 * HOUR_MS)]
    late = send(engine, 5 * HOUR_MS)
    window = TimerFilter(from_ms=T0 + 10 * MINUTE_MS, to_ms=T0 + 3 * HOUR_MS)
    assert engine.bulk_cancel(window).cancelled == 2
    assert states(engine, [early, *inside, late]) == [
        State.SCHEDULED, State.CANCELLED, State.CANCELLED, State.SCHEDULED,
    ]  # fmt: skip
    # Topic and time together: both must match.
    other = send(engine, 20 * MINUTE_MS, topic="payments")
    both = TimerFilter(topic="orders", from_ms=T0, to_ms=T0 + HOUR_MS)
    assert engine.bulk_cancel(both).cancelled == 1  # `early`
    assert engine.get(other).state is State.SCHEDULED


def test_an_id_prefix_selects_client_ids_in_any_topic(engine):
    mine = [send(engine, MINUTE_MS, message_id="acct-7-a"),
            send(engine, HOUR_MS, topic="payments", message_id="acct-7-b")]  # fmt: skip
    not_mine = send(engine, MINUTE_MS, message_id="acct-70-a")
    result = engine.bulk_cancel(TimerFilter(id_prefix="acct-7-"))
    assert result.cancelled == 2
    assert states(engine, [*mine, not_mine]) == [State.CANCELLED, State.CANCELLED, State.SCHEDULED]


def test_purge_removes_fired_unacked_messages_too_and_cancel_does_not(engine, clock):
    fired = [send(engine, 1_000), send(engine, 2_000)]
    pending = send(engine, HOUR_MS)
    clock.advance(2_000)
    engine.run_until_idle()
    assert fired_ids(engine, "orders") == fired and engine.unacked() == 2
    cancel = engine.bulk_cancel(TimerFilter(topic="orders"))
    assert (cancel.cancelled, cancel.purged) == (1, 0)
    assert states(engine, fired) == [State.FIRED] * 2
    purge = engine.bulk_cancel(TimerFilter(topic="orders"), purge=True)
    assert (purge.cancelled, purge.purged, purge.next_token) == (0, 2, "")
    assert purge.fired == {"orders": fired}
    assert states(engine, [*fired, pending]) == [State.CANCELLED] * 3
    assert engine.get(fired[0]).cancelled_at_ms == T0 + 2_000
    assert fired_ids(engine, "orders") == []
    assert engine.store.read_ready_raw("orders", 0, 10) == []
    assert engine.unacked() == 0
    assert engine.topics() == []
    assert engine.ack("orders", fired) == [], "a purged message cannot be acked"


def test_purging_a_dead_letter_topic_removes_its_dead_letters(engine, clock):
    dead = send(engine, 0)
    engine.run_until_idle()
    assert engine.dead_letter("orders", dead, 3, "poison")
    assert fired_ids(engine, "orders.dlq") == [dead]
    result = engine.bulk_cancel(TimerFilter(topic="orders.dlq"), purge=True)
    assert result.purged == 1
    assert engine.get(dead).state is State.CANCELLED
    assert fired_ids(engine, "orders.dlq") == [] and engine.unacked() == 0


def test_a_series_is_stopped_by_cancel_and_its_fired_occurrences_go_with_purge(engine, clock):
    spec = SendSpec(
        "jobs", b"tick", When(WhenKind.DELAY, MINUTE_MS), message_id="nightly",
        options=SendOptions(repeat=Repeat(every_ms=MINUTE_MS)),
    )  # fmt: skip
    engine.send(spec)
    lookalike = send(engine, HOUR_MS, topic="jobs", message_id="nightly2")
    for _ in range(3):
        clock.advance(MINUTE_MS)
        engine.run_until_idle()
    occurrences = ["nightly#1", "nightly#2", "nightly#3"]
    assert fired_ids(engine, "jobs") == occurrences
    cancel = engine.bulk_cancel(TimerFilter(series_id="nightly"))
    assert (cancel.cancelled, cancel.purged) == (1, 0)
    assert engine.get("nightly").state is State.CANCELLED
    clock.advance(5 * MINUTE_MS)
    engine.run_until_idle()
    assert fired_ids(engine, "jobs") == occurrences, "a cancelled series fires no more"
    purge = engine.bulk_cancel(TimerFilter(series_id="nightly"), purge=True)
    assert (purge.cancelled, purge.purged) == (0, 3)
    assert fired_ids(engine, "jobs") == []
    assert engine.get(lookalike).state is State.SCHEDULED, "only the series and its '#n' ids"


def test_redrive_moves_dead_letters_back_to_their_topic_with_a_new_trace_event(engine, clock):
    shared = "shared.dlq"
    orders = [send(engine, 0, dead_letter_topic=shared) for _ in range(2)]
    payment = send(engine, 0, topic="payments", dead_letter_topic=shared)
    engine.run_until_idle()
    clock.advance(1_000)
    for topic, message_id in [("orders", orders[0]), ("orders", orders[1]),
                              ("payments", payment)]:  # fmt: skip
        assert engine.dead_letter(topic, message_id, 5, "failed")
    assert engine.unacked() == 3
    clock.advance(1_000)
    only_orders = engine.redrive(shared, TimerFilter(topic="orders"))
    assert (sorted(only_orders.moved), only_orders.next_token) == (sorted(orders), "")
    engine.run_until_idle()
    assert sorted(fired_ids(engine, "orders")) == sorted(orders)
    assert fired_ids(engine, shared) == [payment]
    back = engine.get(orders[0], include_trace=True)
    assert (back.topic, back.state, back.fired_at_ms) == ("orders", State.FIRED, T0 + 2_000)
    assert not [k for k in back.properties if k.startswith("timerwheel.dead_letter.")]
    assert [(e.kind, e.at_ms - T0, e.detail) for e in back.trace] == [
        (TraceKind.SENT, 0, ""),
        (TraceKind.FIRED, 0, ""),
        (TraceKind.DEAD_LETTERED, 1_000, shared),
        (TraceKind.FIRED, 1_000, ""),
        (TraceKind.REDRIVEN, 2_000, "orders"),
        (TraceKind.FIRED, 2_000, ""),
    ]
    assert back.attempts == 0, "attempts start again in the topic it went back to"
    assert engine.unacked() == 3, "moved, not added"
    assert engine.ack("orders", orders) == orders
    rest = engine.redrive(shared, TimerFilter())
    assert rest.moved == [payment] and fired_ids(engine, "payments") == [payment]
    assert engine.redrive(shared, TimerFilter()).moved == []


def test_redrive_pages_through_a_dead_letter_topic(engine):
    dead = [send(engine, 0) for _ in range(3)]
    engine.run_until_idle()
    for message_id in dead:
        assert engine.dead_letter("orders", message_id, 1, "failed")
    moved, token, calls = [], "", 0
    while True:
        page = engine.redrive("orders.dlq", TimerFilter(), limit=1, page_token=token)
        moved += page.moved
        calls += 1
        token = page.next_token
        if not token:
            break
    assert (sorted(moved), calls) == (sorted(dead), 3)
    assert fired_ids(engine, "orders.dlq") == []


def test_redrive_skips_a_message_that_is_not_a_dead_letter(engine):
    plain = send(engine, 0, topic="orders.dlq")  # sent there, never dead-lettered
    engine.run_until_idle()
    assert engine.redrive("orders.dlq", TimerFilter()).moved == []
    assert fired_ids(engine, "orders.dlq") == [plain]


def test_a_call_that_reaches_the_scan_budget_answers_with_a_token(engine, monkeypatch):
    ids = [send(engine, MINUTE_MS * (i + 1), topic="other") for i in range(4)]
    ours = send(engine, 10 * MINUTE_MS)
    monkeypatch.setattr(engine_module, "BULK_SCAN_BUDGET", 3)
    first = engine.bulk_cancel(TimerFilter(topic="orders"))
    assert (first.cancelled, bool(first.next_token)) == (0, True)
    second = engine.bulk_cancel(TimerFilter(topic="orders"), page_token=first.next_token)
    assert second.cancelled == 1 and engine.get(ours).state is State.CANCELLED
    assert states(engine, ids) == [State.SCHEDULED] * 4


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda e: e.bulk_cancel(TimerFilter()), "filter"),
        (lambda e: e.bulk_cancel(TimerFilter(topic="bad topic")), "filter.topic"),
        (lambda e: e.bulk_cancel(TimerFilter(series_id="s#1")), "filter.series_id"),
        (lambda e: e.bulk_cancel(TimerFilter(id_prefix="a b")), "filter.id_prefix"),
        (lambda e: e.bulk_cancel(TimerFilter(from_ms=-1)), "filter.from_ms"),
        (lambda e: e.bulk_cancel(TimerFilter(from_ms=T0, to_ms=T0)), "filter.to_ms"),
        (lambda e: e.bulk_cancel(TimerFilter(topic="orders"), limit=-1), "limit"),
        (lambda e: e.bulk_cancel(TimerFilter(topic="orders"), limit=10_001), "limit"),
        (lambda e: e.bulk_cancel(TimerFilter(topic="orders"), page_token="%%"), "page_token"),
        (lambda e: e.bulk_cancel(TimerFilter(topic="orders"), page_token="eA=="), "page_token"),
        (lambda e: e.redrive("", TimerFilter()), "dead_letter_topic"),
        (lambda e: e.redrive("orders.dlq", TimerFilter(to_ms=-5)), "filter.to_ms"),
    ],
)
def test_bad_input_is_refused_naming_the_field_and_changes_nothing(engine, call, field):
    kept = send(engine, MINUTE_MS)
    with pytest.raises(InvalidArgument) as refused:
        call(engine)
    assert refused.value.field == field
    assert str(refused.value).startswith(f"{field}=")
    assert engine.get(kept).state is State.SCHEDULED
    assert engine.count("orders") == (1, 0, 0)


def test_what_a_purge_did_survives_a_restart(tmp_path, clock):
    with engine_factory(tmp_path / "data", clock) as make:
        engine = make()
        fired = send(engine, 0)
        pending = send(engine, HOUR_MS)
        engine.run_until_idle()
        assert engine.bulk_cancel(TimerFilter(topic="orders"), purge=True).purged == 1
        engine.close()
        reopened = make()
        assert states(reopened, [fired, pending]) == [State.CANCELLED] * 2
        assert reopened.unacked() == 0 and reopened.count("orders") == (0, 0, 0)
        assert fired_ids(reopened, "orders") == []


def test_what_a_bulk_call_changed_counts_as_cancels_in_the_commit_metrics():
    op = BulkCancelOp(filter=TimerFilter(topic="t"), message_ids=["a", "b", "c"], purge=True)
    counts = commit_counts([op], [(True, (2, {"t": ["c"]}))])
    assert (counts.cancels, counts.weight) == (3, 3)
