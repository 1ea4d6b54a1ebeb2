"""The load-test harness's counts in isolation (timerwheel.loadtest.accounting): a consumer's
tally of receipts, delay, early and redelivered messages and the worst of each second;
the merges across processes; the accounting table that classifies every message
(lost, late, duplicated, cancelled, of unknown outcome) and when a run balances; what the
server still holds of a run's own topics; histogram summaries merged across processes."""

from __future__ import annotations

from types import SimpleNamespace

import grpc

from timerwheel.credentials import PLAIN
from timerwheel.loadtest.accounting import (
    CANCEL_UNKNOWN,
    CANCELLED,
    SENT,
    UNKNOWN,
    UNSENT,
    Accounting,
    Tally,
    account,
    histogram_of,
    merge_counts,
    merge_histograms,
    merge_worst,
    summary,
)
from timerwheel.loadtest.harness import Run
from timerwheel.loadtest.pacing import encode_body, padding_for
from timerwheel.loadtest.scenarios import scenario
from timerwheel.types import RemoteError


def delivery(producer: int, seq: int, deliver_at_ms: int, fired_at_ms: int, attempt: int = 1):
    body = encode_body(producer, seq, padding_for(16))
    return SimpleNamespace(
        body=body, deliver_at_ms=deliver_at_ms, fired_at_ms=fired_at_ms, attempt=attempt
    )


def test_tally_counts_receipts_delay_errors_early_and_redeliveries():
    tally = Tally()
    tally.add([delivery(0, 0, 1_000, 1_001), delivery(0, 5, 1_000, 1_002)], received_ms=1_010)
    tally.add([delivery(1, 2, 2_000, 2_000)], received_ms=1_990)  # 10 ms early
    tally.add([delivery(0, 5, 1_000, 1_002, attempt=2)], received_ms=40_000)  # redelivered
    tally.add([SimpleNamespace(body=b"?", deliver_at_ms=0, fired_at_ms=0, attempt=1)], 5)
    assert tally.received == 5 and tally.first_receipts == 3
    assert tally.redelivered == 1 and tally.foreign == 1 and tally.early == 1
    assert tally.delay_ms == {10: 2}  # first attempts received on time only
    assert tally.fire_ms == {1: 1, 2: 1} and tally.early_ms == {10: 1}
    assert tally.lag_ms == {9: 1, 8: 1}  # received at 1,010, fired at 1,001 and 1,002
    assert bytes(tally.seen[0][:6]) == bytes([1, 0, 0, 0, 0, 2])
    assert tally.last_received_ms == 40_000
    # per second of deliver time, the worst of the first attempts received on time
    assert tally.worst_delay_ms == {1: 10} and tally.worst_fire_ms == {1: 2}


def test_tally_keeps_the_worst_of_each_second_and_merges_take_the_larger():
    tally = Tally()
    tally.add([delivery(0, 0, 1_000, 1_004), delivery(0, 1, 1_999, 2_001)], received_ms=2_005)
    tally.add([delivery(0, 2, 3_500, 3_501)], received_ms=3_520)
    assert tally.worst_delay_ms == {1: 1_005, 3: 20}
    assert tally.worst_fire_ms == {1: 4, 3: 1}
    assert merge_worst([{1: 5, 2: 7}, {2: 9, 4: 1}, {}]) == {1: 5, 2: 9, 4: 1}


def test_merge_counts_sums_per_sequence_and_caps():
    assert merge_counts([bytes([1, 0, 2]), bytes([0, 1, 254, 1])]) == bytes([1, 1, 255, 1])
    assert merge_counts([]) == b""


def test_account_classifies_every_state_and_receipt_count():
    states = {0: bytes([SENT, SENT, SENT, CANCELLED, UNSENT, UNKNOWN, CANCEL_UNKNOWN, SENT])}
    seen = {0: bytes([1, 0, 3, 1, 1, 1, 0])}  # seq 7 never received; shorter than states
    result = account(states, seen, acked=3, early=0, expect_delivery=True)
    assert result.sent == 6  # SENT x4, CANCELLED, CANCEL_UNKNOWN
    assert result.delivered == 3 and result.lost == 2  # seq 1 and seq 7
    assert result.duplicates == 2 and result.duplicated_messages == 1
    assert result.cancelled == 2  # CANCELLED + the CANCEL_UNKNOWN that never came
    assert result.cancelled_delivered == 1 and result.unexpected == 1
    problems = result.problems()
    assert "lost=2" in problems and "cancelled_delivered=1" in problems
    assert "unexpected=1" in problems


def test_account_clean_run_balances_and_has_no_problems():
    states = {0: bytes([SENT] * 5 + [CANCELLED] * 2), 1: bytes([SENT] * 3)}
    seen = {0: bytes([1] * 5), 1: bytes([1, 2, 1])}
    result = account(states, seen, acked=8, early=0, expect_delivery=True)
    assert (result.sent, result.cancelled, result.lost, result.duplicates) == (10, 2, 0, 1)
    assert result.balanced and result.problems() == []


def test_account_flags_early_imbalance_and_receipts_from_unknown_producers():
    states = {0: bytes([SENT, SENT])}
    result = account(states, {0: bytes([1, 1]), 9: bytes([1])}, acked=1, early=1,
                     expect_delivery=True)  # fmt: skip
    problems = result.problems()
    assert "early=1" in problems and "unexpected=1" in problems
    assert any(p.startswith("sent=2 != acked=1") for p in problems)


def test_account_backlog_counts_pending_not_lost():
    result = account({0: bytes([SENT] * 4)}, {}, acked=0, early=0, expect_delivery=False)
    assert result.pending == 4 and result.lost == 0 and result.problems() == []
    assert "sent=0: nothing was stored" in Accounting(True).problems()


def test_account_counts_what_the_server_still_holds_as_late_not_lost():
    states = {0: bytes([SENT] * 10)}
    seen = {0: bytes([1] * 6)}  # 4 never received within the drain wait
    result = account(states, seen, acked=6, early=0, expect_delivery=True)
    result.count_server_held(3)  # the server still held 3 (scheduled, or fired and un-acked)
    assert (result.lost, result.late) == (1, 3)  # the fourth is gone from the server: lost
    assert not result.balanced  # 10 != 6 acked + 3 late: the lost one
    assert result.problems() == ["lost=1", "late=3", "sent=10 != acked=6 + cancelled=0 + late=3"]
    held_more = account(states, seen, acked=6, early=0, expect_delivery=True)
    held_more.count_server_held(50)  # never more late than were missing
    assert (held_more.lost, held_more.late) == (0, 4)
    assert held_more.balanced and held_more.problems() == ["late=4"]


def test_what_the_server_holds_is_each_run_topics_scheduled_and_fired_unacked_count():
    # Only the run's own topics count, so a shared server (--target) is accounted too.
    run = Run(scenario("smoke").with_overrides(topics=3), "127.0.0.1:1", False, PLAIN)
    counts = {topic: 10 * (i + 1) for i, topic in enumerate(run.topics)}
    backlogs = [  # by name, as Topics pages them
        SimpleNamespace(topic="a-before", fired_unacked=500),
        SimpleNamespace(topic=run.topics[0], fired_unacked=7),
        SimpleNamespace(topic=run.topics[2], fired_unacked=2),
        SimpleNamespace(topic="z-someone-else", fired_unacked=1_000),
        SimpleNamespace(topic="zz-never-read", fired_unacked=1_000),
    ]
    asked: list[str] = []

    def topics_page(page_token=""):  # two topics a page, after page_token
        asked.append(page_token)
        after = [t for t in backlogs if t.topic > page_token]
        page, more = after[:2], len(after) > 2
        return SimpleNamespace(topics=page, next_page_token=page[-1].topic if more else "")

    client = SimpleNamespace(
        count=lambda topic: SimpleNamespace(pending=counts[topic]), topics_page=topics_page
    )
    assert run._server_held(client) == 10 + 20 + 30 + 7 + 2
    # From the run's prefix, and no page past its topics.
    assert asked == [f"lt-{run.run_id}-", run.topics[2]]

    def refused(*args, **kwargs):
        raise RemoteError(grpc.StatusCode.UNAVAILABLE, "gone")

    # No count, no claim: the harness then leaves the missing messages lost.
    assert run._server_held(SimpleNamespace(count=refused, topics_page=topics_page)) is None
    assert run._server_held(SimpleNamespace(count=client.count, topics_page=refused)) is None


def test_acks_of_unknown_outcome_loosen_the_balance_and_the_late_claim():
    states = {0: bytes([SENT] * 10)}
    seen = {0: bytes([1] * 8)}  # 2 never received
    # Two acks whose answers were lost with a killed worker: the server counted 6.
    result = account(states, seen, acked=6, early=0, expect_delivery=True, ack_unknown=2)
    result.count_server_held(3)  # one of the 3 held may be a received one whose ack failed
    assert (result.lost, result.late, result.ack_unknown) == (1, 1, 2)
    clean = account(states, {0: bytes([1] * 10)}, acked=8, early=0, expect_delivery=True,
                    ack_unknown=2)  # fmt: skip
    assert clean.balanced and clean.problems() == []


def test_histograms_summarise_and_merge_across_processes():
    first = histogram_of({value: 1 for value in range(1, 501)})
    second = histogram_of({value: 1 for value in range(501, 1001)})
    merged = summary(merge_histograms([first.encode(), second.encode()]))
    assert merged["count"] == 1_000 and merged["max"] == 1_000
    assert merged["p50"] == 500 and merged["p90"] == 900 and merged["p99"] == 990
    assert merged["p999"] == 999 and abs(merged["mean"] - 500.5) < 1
    assert summary(merge_histograms([]))["count"] == 0
