"""Accounting: what the producers sent against what the consumers received and acked.

Producers keep one byte per sequence number (`UNSENT`, `SENT`, ...); consumers keep one
byte per sequence number counting receipts (capped at 255). Both cross the process
boundary as plain `bytes`. `account()` lines them up and classifies every message:

| producer state | times received | counted as |
|---|---|---|
| SENT | 0 | lost (pending, when the scenario expects nothing to fire; late, see below) |
| SENT | 1 | delivered |
| SENT | n >= 2 | delivered, n-1 duplicates |
| CANCELLED | >= 1 | cancelled yet delivered: a violation |
| UNSENT (refused) | >= 1 | unexpected: stored although refused, a violation |
| UNKNOWN (send outcome unknown) | any | neither lost nor unexpected |

A message never received is late rather than lost when the server still holds it at the
end in one of the run's topics, scheduled or fired and un-acked
(`Accounting.count_server_held`): the drain wait ran out before it was delivered (a
killed server worker's streams, say, not yet delivered again), but nothing was lost.

Delay errors are tallied as `Counter`s of integer milliseconds while the run is hot (a
dict increment is well over an order of magnitude cheaper than an HDR record in pure
Python) and turned into HDR histograms (`hdrh`) once at the end; histograms merge across
processes with `add`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field

from hdrh.histogram import HdrHistogram

from timerwheel.loadtest.pacing import decode_body

# Producer-side state of a sequence number.
UNSENT = 0  # not sent, or refused by the server (a refused batch stores nothing)
SENT = 1
CANCELLED = 2  # Cancel answered CANCELLED
UNKNOWN = 3  # the send's outcome is unknown (deadline, transport error)
CANCEL_UNKNOWN = 4  # sent; its Cancel failed in a way that leaves the outcome unknown

HIGHEST_MS = 24 * 3_600_000  # the largest value a delay histogram holds
HIGHEST_US = 600_000_000  # the largest send latency held (10 min)
SIGNIFICANT_DIGITS = 3
PERCENTILES = (50.0, 90.0, 99.0, 99.9)


def new_histogram(highest: int = HIGHEST_MS) -> HdrHistogram:
    return HdrHistogram(1, highest, SIGNIFICANT_DIGITS)


def histogram_of(values: Mapping[int, int], highest: int = HIGHEST_MS) -> HdrHistogram:
    """An HDR histogram of `{value: count}` (values clamped into the histogram's range)."""
    histogram = new_histogram(highest)
    for value, count in values.items():
        histogram.record_value(min(max(value, 0), highest), count)
    return histogram


def merge_histograms(encoded: Iterable[bytes], highest: int = HIGHEST_MS) -> HdrHistogram:
    merged = new_histogram(highest)
    for blob in encoded:
        merged.add(HdrHistogram.decode(blob))
    return merged


def summary(histogram: HdrHistogram) -> dict[str, float | int]:
    """count, mean, p50/p90/p99/p999 and max (in the histogram's unit)."""
    count = histogram.get_total_count()
    if count == 0:
        return {"count": 0, "mean": 0, "p50": 0, "p90": 0, "p99": 0, "p999": 0, "max": 0}
    points = histogram.get_percentile_to_value_dict(list(PERCENTILES))
    return {
        "count": count,
        "mean": round(histogram.get_mean_value(), 3),
        "p50": points[50.0],
        "p90": points[90.0],
        "p99": points[99.0],
        "p999": points[99.9],
        "max": histogram.get_max_value(),
    }


@dataclass
class Tally:
    """What one consumer stream saw. `add` is the hot path: no HDR call in it."""

    seen: dict[int, bytearray] = field(default_factory=dict)  # producer -> receipts per seq
    delay_ms: Counter = field(default_factory=Counter)  # receive - deliver (first attempts)
    fire_ms: Counter = field(default_factory=Counter)  # fired_at - deliver (first attempts)
    # receive - fired_at (first attempts): the delivery's share of the delay error
    lag_ms: Counter = field(default_factory=Counter)
    early_ms: Counter = field(default_factory=Counter)  # deliver - receive, when received early
    ack_ms: Counter = field(default_factory=Counter)  # an Ack batch sent -> answered
    # By the second of the deliver time (epoch s): the worst delay error and fire lateness
    # of first attempts due in it, so a report can say when the tail happened.
    worst_delay_ms: dict[int, int] = field(default_factory=dict)
    worst_fire_ms: dict[int, int] = field(default_factory=dict)
    received: int = 0  # every receipt, duplicates included
    first_receipts: int = 0  # receipts of a message this tally had not seen
    redelivered: int = 0  # receipts with attempt > 1
    foreign: int = 0  # bodies the harness did not write
    acked: int = 0  # the server's Ack answers, summed
    last_received_ms: int = 0

    def ack_answered(self, round_trip_ms: int, ids: int) -> None:
        """`AckSender`'s `on_answer`: one Ack batch answered after `round_trip_ms`."""
        self.ack_ms[round_trip_ms] += 1

    def add(self, deliveries: Iterable, received_ms: int) -> None:
        """Record a DeliveryBatch's deliveries, all received at `received_ms` (wall clock)."""
        seen, delay, fire, lag = self.seen, self.delay_ms, self.fire_ms, self.lag_ms
        worst_delay, worst_fire = self.worst_delay_ms, self.worst_fire_ms
        self.last_received_ms = max(self.last_received_ms, received_ms)
        for delivery in deliveries:
            self.received += 1
            identity = decode_body(delivery.body)
            if identity is None:
                self.foreign += 1
                continue
            producer, seq = identity
            counts = seen.get(producer)
            if counts is None:
                counts = seen[producer] = bytearray()
            if seq >= len(counts):
                counts.extend(bytes(max(seq + 1 - len(counts), len(counts))))
            times = counts[seq]
            if times < 255:
                counts[seq] = times + 1
            if times == 0:
                self.first_receipts += 1
            error_ms = received_ms - delivery.deliver_at_ms
            if error_ms < 0:
                self.early_ms[-error_ms] += 1
            if delivery.attempt > 1:
                self.redelivered += 1
            elif error_ms >= 0:
                fire_ms = delivery.fired_at_ms - delivery.deliver_at_ms
                delay[error_ms] += 1
                fire[fire_ms] += 1
                lag[max(0, received_ms - delivery.fired_at_ms)] += 1  # ms-rounded clocks
                second = delivery.deliver_at_ms // 1000
                if error_ms > worst_delay.get(second, -1):
                    worst_delay[second] = error_ms
                if fire_ms > worst_fire.get(second, -1):
                    worst_fire[second] = fire_ms

    @property
    def early(self) -> int:
        return sum(self.early_ms.values())


def merge_worst(parts: Iterable[Mapping[int, int]]) -> dict[int, int]:
    """Per-second worst values of several tallies: the largest of each second."""
    merged: dict[int, int] = {}
    for part in parts:
        for second, value in part.items():
            if value > merged.get(second, -1):
                merged[second] = value
    return merged


def merge_counts(parts: Iterable[bytes]) -> bytes:
    """Per-sequence receipt counts of several consumers, summed (capped at 255)."""
    merged = bytearray()
    for part in parts:
        if len(part) > len(merged):
            merged.extend(bytes(len(part) - len(merged)))
        if not any(merged):
            merged[: len(part)] = part
            continue
        for seq, times in enumerate(part):
            if times:
                merged[seq] = min(merged[seq] + times, 255)
    return bytes(merged)


@dataclass
class Accounting:
    """The end-of-run ledger. `problems()` lists what makes the run fail."""

    expect_delivery: bool
    sent: int = 0  # stored (the server answered the send)
    cancelled: int = 0
    delivered: int = 0  # distinct messages received
    acked: int = 0  # the server's Ack answers
    lost: int = 0
    pending: int = 0  # sent, not received, and not expected to fire (backlog)
    late: int = 0  # sent, not received in the drain wait, the server still holds it
    duplicates: int = 0  # receipts beyond the first
    duplicated_messages: int = 0
    early: int = 0
    cancelled_delivered: int = 0
    unexpected: int = 0  # received although never sent (refused, or not in the plan)
    unknown: int = 0  # sends whose outcome is unknown
    cancel_unknown: int = 0
    # Acked ids the server's answers may not count: in Ack calls that failed (the worker
    # answering went away: applied or not, unknown; one not applied is delivered and
    # acked again, or still held), or answered as settled already (a duplicate receipt,
    # or an Ack retried by gRPC after its first answer was lost with a killed worker).
    ack_unknown: int = 0
    errors: list[str] = field(default_factory=list)  # producer / consumer failures

    @property
    def balanced(self) -> bool:
        """sent = acked + cancelled (+ pending, when nothing is meant to fire; + late), up
        to the sends, cancels and acks whose outcome is unknown."""
        settled = self.acked + self.cancelled + self.pending + self.late
        return abs(self.sent - settled) <= self.cancel_unknown + self.unknown + self.ack_unknown

    def count_server_held(self, held_by_server: int) -> None:
        """Of the messages never received, count as late (not lost) as many as the
        server still held at the end in the run's own topics, scheduled or fired and
        un-acked (Count and Topics once the consumers stopped). The topics are the
        run's alone (their names carry its id), and the consumers ack all they receive
        and wait for the answers before they report, so each message the server holds
        there is one nobody received yet, to be delivered late rather than lost; but
        for those whose Ack failed (`ack_unknown`), which may be held though received,
        so as many fewer are counted late. A message the server no longer holds and
        nobody received stays lost."""
        held = min(self.lost, max(held_by_server - self.ack_unknown, 0))
        self.late += held
        self.lost -= held

    def problems(self) -> list[str]:
        found = [
            f"{name}={value}"
            for name, value in (
                ("lost", self.lost),
                ("late", self.late),
                ("early", self.early),
                ("cancelled_delivered", self.cancelled_delivered),
                ("unexpected", self.unexpected),
            )
            if value
        ]
        if self.sent == 0:
            found.append("sent=0: nothing was stored")
        if not self.balanced:
            found.append(
                f"sent={self.sent} != acked={self.acked} + cancelled={self.cancelled}"
                + (f" + pending={self.pending}" if self.pending else "")
                + (f" + late={self.late}" if self.late else "")
            )
        return found + self.errors

    def as_dict(self) -> dict:
        return {**asdict(self), "balanced": self.balanced, "problems": self.problems()}


def account(
    states: Mapping[int, bytes],
    seen: Mapping[int, bytes],
    *,
    acked: int,
    early: int,
    expect_delivery: bool,
    errors: Iterable[str] = (),
    ack_unknown: int = 0,
) -> Accounting:
    """Classify every planned message (see the module docstring's table)."""
    result = Accounting(
        expect_delivery, acked=acked, early=early, errors=list(errors), ack_unknown=ack_unknown
    )
    pairs: Counter = Counter()
    for producer, state_bytes in states.items():
        counts = seen.get(producer, b"")
        planned = len(state_bytes)
        aligned = bytes(counts[:planned]) + bytes(max(planned - len(counts), 0))
        pairs.update(zip(state_bytes, aligned, strict=True))
        result.unexpected += sum(1 for times in counts[planned:] if times)
    for producer, counts in seen.items():
        if producer not in states:
            result.unexpected += sum(1 for times in counts if times)
    for (state, times), n in pairs.items():
        _classify(result, state, times, n)
    return result


def _classify(result: Accounting, state: int, times: int, n: int) -> None:
    if times >= 2 and state != UNSENT:
        result.duplicated_messages += n
        result.duplicates += (times - 1) * n
    if state in (SENT, CANCELLED, CANCEL_UNKNOWN):
        result.sent += n
    if state == SENT and times:
        result.delivered += n
    elif state == SENT and result.expect_delivery:
        result.lost += n
    elif state == SENT:
        result.pending += n
    elif state == CANCELLED:
        result.cancelled += n
        if times:
            result.cancelled_delivered += n
    elif state == CANCEL_UNKNOWN:
        result.cancel_unknown += n
        if times:
            result.delivered += n
        else:
            result.cancelled += n
    elif state == UNKNOWN:
        result.unknown += n
        result.delivered += n if times else 0
    elif state == UNSENT and times:
        result.unexpected += n
