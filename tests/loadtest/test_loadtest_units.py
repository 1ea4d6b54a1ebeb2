"""The load-test harness's pieces in isolation: pacing, deliver times, the body codec,
consumer tallies, the accounting table, histogram summaries, scenarios and the report."""

from __future__ import annotations

import itertools
import random
import sys
import threading
import time
from types import SimpleNamespace

import grpc
import pytest
from helpers.loadtest_figures import RUN_DATE, fake_figures

from timerwheel.cli.commands.loadtest import is_loopback
from timerwheel.credentials import PLAIN
from timerwheel.loadtest import report
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
from timerwheel.loadtest.pacing import (
    MIN_BODY_BYTES,
    SWITCH_INTERVAL_S,
    DeliverTimes,
    Pacer,
    decode_body,
    encode_body,
    padding_for,
    split_messages,
    use_measuring_switch_interval,
)
from timerwheel.loadtest.scenarios import SCENARIOS, ScenarioError, scenario
from timerwheel.types import RemoteError


# == pacing =================================================================================
def test_pacer_interleaves_producers_into_one_even_stream():
    rate, batch, producers, start = 1_000, 10, 4, 5_000_000_000
    pacers = [Pacer(start, rate, batch, producers, index) for index in range(producers)]
    due = sorted(pacer.due_ns(k) for pacer in pacers for k in range(25))
    gaps = {b - a for a, b in itertools.pairwise(due)}
    assert gaps == {10_000_000}  # 10 messages every 10 ms = 1,000 msg/s, no bunching
    assert due[0] == start and due[-1] == start + 99 * 10_000_000


def test_pacer_schedule_is_fixed_in_advance_not_by_answers():
    pacer = Pacer(0, rate=14_000, batch=100, producers=1, index=0)
    # Request k is due at k * 100 / 14,000 s whatever happened to earlier requests.
    assert pacer.due_ns(140) == 1_000_000_000
    assert pacer.due_ns(1_400) == 10_000_000_000


def test_split_messages_gives_every_message_to_exactly_one_producer():
    for total, producers in ((10, 3), (1, 4), (1_000_001, 16)):
        shares = [split_messages(total, producers, i) for i in range(producers)]
        assert sum(shares) == total and max(shares) - min(shares) <= 1


def test_deliver_times_uniform_and_burst_stay_in_their_ranges():
    rng = random.Random(7)
    uniform = DeliverTimes(30_000, 600_000)
    samples = [uniform.sample(rng, 1_000_000) for _ in range(5_000)]
    assert min(samples) >= 1_030_000 and max(samples) <= 1_600_000
    assert max(samples) - min(samples) > 500_000  # spread over the range, not a constant
    burst = DeliverTimes(0, 0, burst_at_ms=9_000_000, burst_window_ms=1_000)
    due = [burst.sample(rng, 1_000_000) for _ in range(5_000)]
    assert min(due) >= 9_000_000 and max(due) < 9_001_000 and len(set(due)) > 900


def test_body_codec_round_trips_and_pads_to_the_size():
    body = encode_body(513, 2**40 + 5, padding_for(64))
    assert len(body) == 64 and decode_body(body) == (513, 2**40 + 5)
    assert decode_body(b"short") is None and MIN_BODY_BYTES == 10


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


def test_harness_processes_switch_threads_every_millisecond():
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # CPython's default
        use_measuring_switch_interval()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S) == 0.001
    finally:
        sys.setswitchinterval(before)


def test_merge_counts_sums_per_sequence_and_caps():
    assert merge_counts([bytes([1, 0, 2]), bytes([0, 1, 254, 1])]) == bytes([1, 1, 255, 1])
    assert merge_counts([]) == b""


# == the accounting table ===================================================================
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


class _Stream:
    """A Subscribe stream that yields `batches`, then raises `error` (or ends)."""

    def __init__(self, batches, error=None):
        self.batches, self.error, self.cancelled = batches, error, False

    def __iter__(self):
        yield from self.batches
        if self.error is not None:
            raise self.error

    def cancel(self):
        self.cancelled = True


class _Idle(_Stream):
    """A stream that is up and delivers nothing until cancelled."""

    def __init__(self):
        super().__init__([])
        self._cancel = threading.Event()

    def __iter__(self):
        self._cancel.wait(30)
        yield from ()

    def cancel(self):
        self.cancelled = True
        self._cancel.set()


def test_a_consumer_stream_subscribes_again_after_an_error_keeping_its_tally():
    from timerwheel.loadtest.consumer import ConsumerPlan, Stream

    def delivery(seq):
        return SimpleNamespace(
            message_id=f"m{seq}", body=encode_body(0, seq, b""),
            deliver_at_ms=0, fired_at_ms=0, attempt=1,
        )  # fmt: skip

    gone = RemoteError(grpc.StatusCode.UNAVAILABLE, "Socket closed")
    streams = iter([
        _Stream([[delivery(0)]], gone),  # the worker dies after one batch
        _Stream([], gone),  # still restarting
        _Stream([[delivery(1)], [delivery(0)]]),  # back: the un-acked one again, then ended
    ])  # fmt: skip
    idle = _Idle()
    opened = threading.Event()
    acked: list[str] = []

    def subscribe(topic, max_in_flight):
        try:
            return next(streams)
        except StopIteration:
            opened.set()
            return idle  # the fourth: up, idle until stopped

    def ack(topic, ids):
        acked.extend(ids)
        return len(ids)

    client = SimpleNamespace(subscribe=subscribe, ack=ack)
    plan = ConsumerPlan(0, "t", ("lt-x",), 10, 5.0, 60.0, ack_linger_ms=0)
    stream = Stream(client, "lt-x", plan, on_batch=lambda: None)
    assert opened.wait(10)
    stream.stop()
    assert stream.resubscribed == 3 and stream.error is None and idle.cancelled
    assert stream.tally.received == 3 and stream.tally.first_receipts == 2
    assert sorted(acked) == ["m0", "m0", "m1"] and stream.tally.acked == 3
    assert stream.ack_unknown == 0


def test_acks_lost_with_a_worker_are_of_unknown_outcome_not_an_error():
    from timerwheel.loadtest.consumer import ConsumerPlan, Stream

    batches = [[SimpleNamespace(
        message_id=f"m{seq}", body=encode_body(0, seq, b""), deliver_at_ms=0, fired_at_ms=0,
        attempt=1,
    )] for seq in range(3)]  # fmt: skip
    answers = iter([RemoteError(grpc.StatusCode.UNAVAILABLE, "Socket closed"), 0, 1])

    def ack(topic, ids):  # failed; then a retry that finds it acked; then acked
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    idle = _Idle()
    subscriptions = iter([_Stream([batches[0]]), _Stream([batches[1]]), _Stream([batches[2]])])
    client = SimpleNamespace(subscribe=lambda *a: next(subscriptions, idle), ack=ack)
    plan = ConsumerPlan(0, "t", ("lt-x",), 10, 5.0, 60.0, ack_linger_ms=0)
    stream = Stream(client, "lt-x", plan, on_batch=lambda: None)
    for _ in range(500):
        if stream.resubscribed >= 3:
            break
        time.sleep(0.01)
    stream.stop()
    assert stream.error is None and stream.tally.acked == 1 and stream.ack_unknown == 2


def test_a_consumer_stream_still_down_at_the_stop_is_an_error():
    from timerwheel.loadtest.consumer import ConsumerPlan, Stream

    gone = RemoteError(grpc.StatusCode.UNAVAILABLE, "Connection refused")
    client = SimpleNamespace(subscribe=lambda topic, max_in_flight: _Stream([], gone))
    plan = ConsumerPlan(0, "t", ("lt-x",), 10, 5.0, 60.0, ack_linger_ms=0)
    stream = Stream(client, "lt-x", plan, on_batch=lambda: None)
    for _ in range(200):
        if stream.resubscribed >= 2:
            break
        time.sleep(0.01)
    stream.stop()
    assert stream.error is not None and "still down at the stop" in stream.error
    assert "UNAVAILABLE" in stream.error


# == histograms =============================================================================
def test_histograms_summarise_and_merge_across_processes():
    first = histogram_of({value: 1 for value in range(1, 501)})
    second = histogram_of({value: 1 for value in range(501, 1001)})
    merged = summary(merge_histograms([first.encode(), second.encode()]))
    assert merged["count"] == 1_000 and merged["max"] == 1_000
    assert merged["p50"] == 500 and merged["p90"] == 900 and merged["p99"] == 990
    assert merged["p999"] == 999 and abs(merged["mean"] - 500.5) < 1
    assert summary(merge_histograms([]))["count"] == 0


# == scenarios and the command line ==========================================================
def test_scenarios_presets_and_overrides():
    assert set(SCENARIOS) == {
        "smoke", "tdmq", "tdmq-threads", "overload", "burst", "cancel", "backlog"
    }  # fmt: skip
    overload = scenario("overload")  # about twice what one process sustains
    assert (overload.rate, overload.scaled_delay_ms) == (40_000, (3_000, 60_000))
    threads = scenario("tdmq-threads")
    assert (threads.producer_threads, threads.batch, threads.rate) == (16, 1, 14_000)
    tdmq = scenario("tdmq")
    assert (tdmq.rate, tdmq.scaled_delay_ms) == (14_000, (30_000, 600_000))
    assert tdmq.with_overrides(delay_scale=0.1).scaled_delay_ms == (3_000, 60_000)
    burst = scenario("burst").with_overrides(count=300_000, rate=60_000)
    assert burst.messages == 300_000 and burst.duration_s == 5.0
    # the window opens burst_lead_ms after the planned end of the 5 s of sends
    assert burst.burst_offset_ms == 5_000 + 10_000 and tdmq.burst_offset_ms == 0
    assert scenario("backlog").send_overrun_ms == 600_000 > tdmq.send_overrun_ms
    assert scenario("smoke").with_overrides(rate=None).rate == scenario("smoke").rate


@pytest.mark.parametrize(
    ("changes", "named"),
    [
        ({"rate": 0}, "rate=0"),
        ({"body_bytes": 4}, "body_bytes=4"),
        ({"producer_threads": 4, "batch": 100}, "batch=100: must be 1 with producer_threads"),
        ({"connections": 0}, "connections=0: must be at least 1"),
        ({"producer_threads": 4, "batch": 1, "connections": 2}, "connections=2: must be 1"),
        ({"delay_min_ms": 10, "delay_max_ms": 5}, "delay_min_ms=10"),
        ({"cancel_share": 1.5}, "cancel_share=1.5"),
        ({"consumers": 0}, "consumers=0"),
        ({"ack_linger_ms": -1}, "ack_linger_ms=-1"),
        ({"send_overrun_ms": -1}, "send_overrun_ms=-1"),
        ({"bogus": 1}, "bogus"),
    ],
)
def test_scenario_overrides_refuse_bad_values_naming_them(changes, named):
    with pytest.raises(ScenarioError, match=named):
        scenario("smoke").with_overrides(**changes)
    with pytest.raises(ScenarioError, match="nope"):
        scenario("nope")


def test_loopback_targets_only_by_default():
    assert is_loopback("127.0.0.1:7070") and is_loopback("localhost:1")
    assert is_loopback("[::1]:7070") and is_loopback("127.3.2.1:80")
    assert not is_loopback("10.0.0.5:7070") and not is_loopback("example.org:7070")


# == the report =============================================================================
def test_report_heading_says_the_run_as_it_was_and_the_preset_apart():
    """A preset's description says its own rate and delays; a run with --rate or
    --delay-scale is headed by what it ran (a 40,000/s run was once headed "14,000 sends/s")."""
    fig = fake_figures()
    fig["description"] = "TDMQ's shape: 14,000 sends/s, delay 30 s..10 min"
    fig["config"].update(rate=40_000, messages=2_400_000, duration_s=60.0)
    heading, _, preset = report.markdown(fig).splitlines()[:3]
    assert heading == (
        f"### `tdmq` as run: 2,400,000 messages at 40,000/s for 60 s, delay 3 s..1 min ({RUN_DATE})"
    )
    assert preset == (
        "Preset `tdmq` before any flag: TDMQ's shape: 14,000 sends/s, delay 30 s..10 min."
    )

    fig["config"].update(
        rate=50_000, messages=1_000_000, duration_s=20.0, burst_window_ms=1_000,
        delay="all due in one 1000 ms window",
    )  # fmt: skip
    assert report.markdown(fig).splitlines()[0] == (
        "### `tdmq` as run: 1,000,000 messages at 50,000/s for 20 s, all due in one "
        f"1000 ms window ({RUN_DATE})"
    )


def test_report_puts_tdmq_next_to_ours_in_a_table_that_fits_a_terminal():
    text = report.markdown(fake_figures())
    cells = [
        [cell.strip() for cell in line.strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ")
    ]
    rows = {row[0]: row[1:] for row in cells}
    header = next(line for line in text.splitlines() if line.startswith("| |"))
    assert header.startswith("| | TDMQ RocketMQ (8-core broker) | timerwheel (")
    assert rows["Producers"][0] == "16 threads" and rows["Delay error P999"][0] == "979 ms"
    assert rows["Send rate (msg/s)"][1] == "13,990 (target 14,000)"
    assert rows["Send latency avg"][1] == "1.5 ms" and rows["Send latency P99"][1] == "2.0 ms"
    assert [rows[f"Delay error {p}"][1] for p in ("P50", "P90", "P99", "P999", "max")] == [
        "2 ms", "5 ms", "9 ms", "12 ms", "15 ms",
    ]  # fmt: skip
    assert rows["Server CPU, send phase"][1] == "88.5% of 1 core = 44% of 2 cores"
    assert rows["Server peak RSS"][1] == "200 MiB"
    assert rows["Consumers"][1] == "1, acks gathered 10 ms"
    assert max(len(line) for line in text.splitlines() if line.startswith("|")) <= 100
    assert "- delay error: when the consumer received a message minus the deliver time" in text
    assert "server CPU, whole run (send, wait and drain phases" in text
    assert (
        "- delivery lag (server fire -> consumer receipt) P50 / P99 / P999 / max: "
        "2 / 9 / 7 / 8 ms" in text
    )
    assert "- result: OK" in text and "0.50 0.40 0.30" in text
    assert (
        "- interpreter (the harness's and the spawned server's): CPython 3.11.2, "
        "/usr/bin/python3.11, libpython static" in text
    )
    assert ("the whole machine with the harness): +1 s: 15 / 9 ms (server 97.5%, writer 61%, "
            "RocksDB 45.5%, machine 186%), +2 s: 6 / 2 ms (server 40%), +0 s: 4 / 1 ms\n"
            in text)  # fmt: skip
    assert (
        "(they share one GIL: the server at its ceiling, where a little more load grows the "
        "tail tenfold): 1 of 3 (+1 s to +1 s)\n" in text
    )
    # largest first, shares under half a percent left out
    assert "one core): writer 61.5%, grpc_calls 20%, rocksdb_compaction 3.2%\n" in text


def test_report_names_the_thread_producer_shape():
    figures = fake_figures()
    figures["config"].update(producers=1, producer_threads=16, batch=1)
    assert "| 1 x 16 threads, single sends, batching producer |" in report.markdown(figures)


def test_report_says_failed_and_why():
    text = report.markdown(fake_figures(lost=3))
    assert "- result: FAILED: lost=3" in text and "| 3 / 0 / 0 |" in text
    assert '"lost": 3' in report.to_json(fake_figures(lost=3))


def test_report_says_plainly_when_the_offered_rate_was_not_reached():
    figures = fake_figures()
    figures["send"].update(
        rate_reached=False, rate_achieved=3_012, rate_target=8_000, sent=90_386,
        planned=240_000, max_behind_schedule_ms=21_500, producers_stopped_behind=4,
    )  # fmt: skip
    text = report.markdown(figures)
    assert (
        "- offered rate reached: NO: could not reach the offered rate: 3,012 of 8,000 msg/s "
        "achieved, 90,386 of 240,000 planned messages stored, producers up to 21,500 ms "
        "behind schedule (4 stopped at the end of the send phase)"
    ) in text
    assert "- offered rate reached: yes (13,990 of 14,000 msg/s)" in report.markdown(fake_figures())


# == duration flags carry their unit ===========================================================
def _loadtest_args(*flags: str):
    from timerwheel.cli.main import build_parser

    return build_parser().parse_args(["loadtest", "--scenario", "smoke", *flags])


def test_loadtest_duration_flags_take_units_into_the_scenario():
    from timerwheel.cli.commands.loadtest import duration_overrides

    args = _loadtest_args(
        "--duration", "2m", "--delay-min", "250ms", "--delay-max", "1.5s", "--grace", "2s",
        "--drain-timeout", "1m", "--send-overrun", "90s", "--ack-linger", "5ms",
        "--burst-window", "1s", "--burst-lead", "10s",
    )  # fmt: skip
    chosen = scenario("smoke").with_overrides(**duration_overrides(args))
    assert chosen.duration_s == 120.0 and chosen.messages == chosen.rate * 120
    assert (chosen.delay_min_ms, chosen.delay_max_ms) == (250, 1_500)
    assert (chosen.grace_ms, chosen.drain_timeout_ms) == (2_000, 60_000)
    assert (chosen.send_overrun_ms, chosen.ack_linger_ms) == (90_000, 5)
    assert (chosen.burst_window_ms, chosen.burst_lead_ms) == (1_000, 10_000)
    # A flag not given keeps the preset's value.
    assert scenario("smoke").with_overrides(**duration_overrides(_loadtest_args())) == scenario(
        "smoke"
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--duration", "10"), "--duration='10': give a unit, e.g. 10s or 10ms"),
        (("--grace", "500"), "--grace='500': give a unit, e.g. 500s or 500ms"),
        (("--drain-timeout=60"), "--drain-timeout='60': give a unit"),
        (("--delay-min", "-1s"), "--delay-min='-1s': negative"),
        (("--send-overrun", "soon"), "--send-overrun='soon': not a duration"),
        (("--grace-ms", "500"), "--grace-ms is now --grace with a unit, e.g. --grace 500ms"),
        (("--delay-max-ms", "3000"), "--delay-max-ms is now --delay-max with a unit"),
    ],
)
def test_loadtest_refuses_a_bare_or_old_duration_naming_flag_and_fix(flags, message, capsys):
    """Refused before anything starts: exit 2 and one line that says what to type."""
    from timerwheel.cli.main import main

    flags = (flags,) if isinstance(flags, str) else flags
    code = main(["loadtest", "--scenario", "smoke", "--no-progress", *flags])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("timerwheel loadtest: ") and message in err, err
