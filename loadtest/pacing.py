"""The open-loop send schedule, the deliver-time distribution and the message body codec.

Open loop: a producer does not send "as fast as the server answers" (that would hide a
slow server behind a slower send rate, the *coordinated omission* mistake). Each request
has an intended send time fixed before the run starts; the producer waits for that time
and sends, whether or not earlier requests have been answered. The latency recorded from
the intended time therefore includes any time the producer spent behind schedule.

The schedule interleaves the producers evenly: with P producers, rate R messages/s and
B messages per request, request k of producer p is the (k*P + p)-th request overall, due
at `start + (k*P + p) * B / R` seconds. Together they send R messages/s in an even
stream, whatever P is.

Every body starts with a 10-byte header, the producer index (u16) and its sequence
number (u64), so a consumer can account for each message without any id list crossing
processes.
"""

from __future__ import annotations

import random
import struct
import sys
from dataclasses import dataclass

HEADER = struct.Struct(">HQ")  # producer index, sequence number
MIN_BODY_BYTES = HEADER.size
NS_PER_S = 1_000_000_000
# The harness's processes (and the Redis peer's) switch threads every millisecond, as the
# server does (timerwheel.procs.gil), so they measure the server and not their own GIL. With
# CPython's 5 ms a consumer's stream thread waited behind its own ack and gRPC threads,
# and the tail of the delivery lag (server fire -> receipt) and of the delay error about
# doubled against 1 ms: the harness's own waits, not the server's.
SWITCH_INTERVAL_S = 0.001


def use_measuring_switch_interval() -> None:
    """Called first in every process the harness or the peer spawns."""
    sys.setswitchinterval(SWITCH_INTERVAL_S)


def encode_body(producer: int, seq: int, padding: bytes) -> bytes:
    """The body of message `seq` of `producer`: header + padding (the body size less 10)."""
    return HEADER.pack(producer, seq) + padding


def decode_body(body: bytes) -> tuple[int, int] | None:
    """(producer, seq) of a harness body; None for a body the harness did not write."""
    if len(body) < HEADER.size:
        return None
    return HEADER.unpack_from(body)


def padding_for(body_bytes: int) -> bytes:
    return b"x" * (body_bytes - HEADER.size)


def split_messages(total: int, producers: int, index: int) -> int:
    """How many of `total` messages producer `index` sends (the first ones get the rest)."""
    return total // producers + (1 if index < total % producers else 0)


@dataclass(frozen=True)
class Pacer:
    """When request k of one producer is due, in monotonic nanoseconds."""

    start_ns: int
    rate: int  # messages per second, all producers together
    batch: int
    producers: int
    index: int

    def due_ns(self, k: int) -> int:
        slot = k * self.producers + self.index
        return self.start_ns + slot * self.batch * NS_PER_S // self.rate


@dataclass(frozen=True)
class DeliverTimes:
    """Deliver times: `now + U[low, high]` ms, or (burst) `burst_at + U[0, window)` ms."""

    low_ms: int
    high_ms: int
    burst_at_ms: int = 0  # > 0: a burst, and low/high are ignored
    burst_window_ms: int = 0

    def sample(self, rng: random.Random, now_ms: int) -> int:
        if self.burst_at_ms:
            return self.burst_at_ms + rng.randrange(self.burst_window_ms)
        return now_ms + rng.randint(self.low_ms, self.high_ms)
