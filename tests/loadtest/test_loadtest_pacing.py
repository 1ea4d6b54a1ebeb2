"""The load-test harness's sending side in isolation (timerwheel.loadtest.pacing): the
pacers interleave the producers into one even stream fixed in advance, every message
goes to exactly one producer, deliver times stay in their uniform or burst range, the
body codec round-trips and pads, and the harness's processes switch threads every
millisecond."""

from __future__ import annotations

import itertools
import random
import sys

import pytest

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


def test_harness_processes_switch_threads_every_millisecond():
    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)  # CPython's default
        use_measuring_switch_interval()
        assert sys.getswitchinterval() == pytest.approx(SWITCH_INTERVAL_S) == 0.001
    finally:
        sys.setswitchinterval(before)
