"""timerwheel.engine.ids: server-made message ids, unguessable and in deliver-time order."""

from __future__ import annotations

import itertools
import threading

from timerwheel.engine.ids import MessageIds
from timerwheel.engine.prepare import prepare_sends
from timerwheel.wheels.domain import SendSpec, When, WhenKind
from timerwheel.wheels.settings import Settings

DUE_MS = 1_795_344_000_123


def test_server_made_ids_are_unique_across_threads():
    ids = MessageIds()
    taken: list[list[str]] = [[] for _ in range(4)]

    def take(slot: list[str]) -> None:
        for size in range(1, 200):
            slot.extend(ids.take([DUE_MS] * size))

    threads = [threading.Thread(target=take, args=(slot,)) for slot in taken]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [message_id for slot in taken for message_id in slot]
    assert len(every) == 4 * sum(range(1, 200))
    assert len(set(every)) == len(every)
    assert all(len(i) == 32 and i == i.upper() and int(i, 16) >= 0 for i in every)


def test_server_made_ids_are_the_deliver_time_then_80_random_bits():
    """Unguessable: below the time, no bit is fixed or counts up, so one id predicts
    nothing about the next one due in the same millisecond.

    Each of the 80 low bits is set in 30%..70% of 4,000 ids (a fair bit strays past that
    with odds around 1e-140); a prefix + counter scheme has bits that are always 0 or 1.
    """
    taken = MessageIds().take([DUE_MS] * 2_000) + MessageIds().take([DUE_MS] * 2_000)
    assert {i[:12] for i in taken} == {f"{DUE_MS:012X}"}
    ids = [int(i, 16) for i in taken]
    for bit in range(80):
        share = sum(i >> bit & 1 for i in ids) / len(ids)
        assert 0.3 < share < 0.7, f"bit {bit} is set in {share:.0%} of the ids"
    consecutive = {(a ^ b) >> 40 & (2**40 - 1) for a, b in itertools.pairwise(ids)}
    assert 0 not in consecutive  # no two neighbours share the upper half of their randomness


def test_ids_sort_by_deliver_time_whatever_the_order_they_are_taken_in():
    due = [DUE_MS + 60_000, DUE_MS, DUE_MS + 3_000, DUE_MS - 5, DUE_MS + 1]
    taken = MessageIds().take(due)
    assert [i[:12] for i in taken] == [f"{t:012X}" for t in due]
    assert sorted(taken) == [taken[due.index(t)] for t in sorted(due)]


def test_a_batch_of_sends_gets_ids_in_the_order_its_timers_are_due(tmp_path):
    now_ms = 1_700_000_000_000
    specs = [
        SendSpec("orders", b"late", When(WhenKind.DELAY, 59_000)),
        SendSpec("orders", b"now", When(WhenKind.DELAY, 0)),
        SendSpec("orders", b"abs", When(WhenKind.DELIVER_AT, now_ms + 7_000)),
        SendSpec("orders", b"level", When(WhenKind.LEVEL, 1)),  # 1 s
        SendSpec("orders", b"mine", When(WhenKind.DELAY, 1), message_id="client-chosen"),
    ]
    op = prepare_sends(specs, now_ms, Settings(data_dir=str(tmp_path)), MessageIds())

    assert op.message_ids[4] == "client-chosen"  # a client's id is its own
    made = op.message_ids[:4]
    assert [int(i[:12], 16) - now_ms for i in made] == [59_000, 0, 7_000, 1_000]
    assert op.deliver_times_ms[:4] == [int(i[:12], 16) for i in made]
