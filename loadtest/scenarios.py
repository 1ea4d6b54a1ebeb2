"""The named load-test scenarios and every knob a run has.

A `Scenario` is a frozen dataclass: a preset from `SCENARIOS`, changed with
`scenario.with_overrides(rate=..., duration_s=...)` (the command line's flags). Two
shapes of deliver time exist:

* uniform delays: each message is due `now + U[delay_min_ms, delay_max_ms] * delay_scale`
  after it is sent (smoke, tdmq, cancel, backlog);
* a burst (`burst_window_ms > 0`): every message is due inside ONE window that opens
  `burst_lead_ms` after the last planned send (burst), so the service must fire them all
  at once; `delay_*` are ignored.

`count` (when given) fixes the number of messages and derives the duration from the
rate: `duration_s = count / rate` (burst and backlog are sized by count, not time).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from timerwheel.acks import DEFAULT_ACK_LINGER_MS
from timerwheel.loadtest.pacing import MIN_BODY_BYTES

SECOND_MS = 1_000
MINUTE_MS = 60 * SECOND_MS
DAY_MS = 24 * 60 * MINUTE_MS


class ScenarioError(ValueError):
    """A scenario or an override that cannot run (the message names the field and value)."""


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    rate: int  # messages per second, all producers together
    duration_s: float  # length of the send phase
    batch: int = 100  # messages per request; 1 uses the unary Send
    producers: int = 2  # producer processes
    producer_threads: int = 0  # > 0: per process, threads sending single messages (TDMQ)
    # gRPC connections per producer process, its requests round-robin over them. With
    # `serve --workers N` each connection is one worker's (the kernel hashes it to one), so
    # a few producers on one connection each can land on one worker by chance.
    connections: int = 1
    consumers: int = 1  # consumer processes (0: nobody subscribes)
    topics: int = 1
    body_bytes: int = 64
    delay_min_ms: int = 1_000
    delay_max_ms: int = 5_000
    delay_scale: float = 1.0  # multiplies delay_min_ms / delay_max_ms
    burst_window_ms: int = 0  # > 0: every message due inside one window (see docstring)
    burst_lead_ms: int = 10_000
    cancel_share: float = 0.0  # share of timers cancelled right after their send
    expect_delivery: bool = True  # False (backlog): timers stay pending; nothing may fire
    count: int | None = None  # fixed number of messages (derives duration_s)
    max_outstanding: int = 64  # requests in flight per producer before it must wait
    max_in_flight: int = 5_000  # per Subscribe stream
    ack_linger_ms: int = DEFAULT_ACK_LINGER_MS  # consumers gather acks this long (AckSender)
    # Producers still sending this long after the planned end of the send phase are
    # stopped and the run fails; backlog, which measures a count and not a rate, waits longer.
    send_overrun_ms: int = 90_000
    grace_ms: int = 2_000  # after the last deliver time, before accounting
    drain_timeout_ms: int = 60_000  # longest wait for stragglers after the last deliver time
    rpc_timeout_s: float = 30.0
    # > 0: an overload run (timerwheel.loadtest.overload): the producers' shortfall is
    # expected, and the run passes on fire lateness P999 within this, nothing lost or early.
    fire_p999_target_ms: int = 0

    def __post_init__(self) -> None:
        positive = ("rate", "batch", "producers", "connections", "topics", "max_outstanding")
        for name in (*positive, "max_in_flight"):
            if getattr(self, name) < 1:
                raise ScenarioError(f"{name}={getattr(self, name)}: must be at least 1")
        if self.producer_threads < 0:
            raise ScenarioError(f"producer_threads={self.producer_threads}: must be >= 0")
        if self.producer_threads and self.batch != 1:
            raise ScenarioError(
                f"batch={self.batch}: must be 1 with producer_threads={self.producer_threads} "
                "(each thread sends single messages; the batching producer batches them)"
            )
        if self.producer_threads and self.connections != 1:
            raise ScenarioError(
                f"connections={self.connections}: must be 1 with producer_threads="
                f"{self.producer_threads} (the threads share one batching producer)"
            )
        if self.send_overrun_ms < 0:
            raise ScenarioError(f"send_overrun_ms={self.send_overrun_ms}: must not be negative")
        if self.ack_linger_ms < 0:
            raise ScenarioError(f"ack_linger_ms={self.ack_linger_ms}: must not be negative")
        if self.consumers < 0:
            raise ScenarioError(f"consumers={self.consumers}: must not be negative")
        if self.expect_delivery and self.consumers < 1:
            raise ScenarioError(f"consumers=0: scenario {self.name!r} needs a consumer")
        if self.duration_s <= 0:
            raise ScenarioError(f"duration_s={self.duration_s}: must be positive")
        if self.body_bytes < MIN_BODY_BYTES:
            raise ScenarioError(
                f"body_bytes={self.body_bytes}: at least {MIN_BODY_BYTES} (the body carries "
                "the producer and sequence number)"
            )
        if not 0 <= self.delay_min_ms <= self.delay_max_ms:
            raise ScenarioError(
                f"delay_min_ms={self.delay_min_ms}, delay_max_ms={self.delay_max_ms}: "
                "need 0 <= min <= max"
            )
        if self.delay_scale <= 0:
            raise ScenarioError(f"delay_scale={self.delay_scale}: must be positive")
        if not 0.0 <= self.cancel_share <= 1.0:
            raise ScenarioError(f"cancel_share={self.cancel_share}: must be within 0..1")
        if self.count is not None and self.count < 1:
            raise ScenarioError(f"count={self.count}: must be at least 1")

    # -- derived figures --------------------------------------------------------------------
    @property
    def messages(self) -> int:
        """Messages planned in the whole run."""
        return self.count if self.count is not None else max(round(self.rate * self.duration_s), 1)

    @property
    def send_phase_ms(self) -> int:
        return -(-self.messages * 1000 // self.rate)  # ceil

    @property
    def scaled_delay_ms(self) -> tuple[int, int]:
        return round(self.delay_min_ms * self.delay_scale), round(
            self.delay_max_ms * self.delay_scale
        )

    @property
    def burst_offset_ms(self) -> int:
        """How long after the start a burst's window opens (0: not a burst)."""
        return self.send_phase_ms + self.burst_lead_ms if self.burst_window_ms else 0

    @property
    def latest_delay_ms(self) -> int:
        """The furthest a deliver time lies after its send (bounds the wait phase)."""
        if self.burst_window_ms:
            return self.burst_lead_ms + self.burst_window_ms + self.send_phase_ms
        return self.scaled_delay_ms[1]

    def with_overrides(self, **changes: object) -> Scenario:
        """A copy with the given fields (None values ignored); `count` re-derives duration."""
        given = {name: value for name, value in changes.items() if value is not None}
        unknown = set(given) - {field.name for field in dataclasses.fields(self)}
        if unknown:
            raise ScenarioError(f"unknown scenario field(s): {', '.join(sorted(unknown))}")
        scenario = dataclasses.replace(self, **given)
        if scenario.count is not None:
            scenario = dataclasses.replace(scenario, duration_s=scenario.count / scenario.rate)
        return scenario

    def describe_delay(self) -> str:
        if self.burst_window_ms:
            return f"all due in one {self.burst_window_ms} ms window"
        low, high = self.scaled_delay_ms
        return f"{_human_ms(low)}..{_human_ms(high)}"


def _human_ms(value_ms: int) -> str:
    for unit_ms, suffix in ((DAY_MS, "d"), (MINUTE_MS, "min"), (SECOND_MS, "s")):
        if value_ms >= unit_ms and value_ms % (unit_ms // 10 or 1) == 0:
            return f"{value_ms / unit_ms:g} {suffix}"
    return f"{value_ms} ms"


SCENARIOS: dict[str, Scenario] = {
    scenario.name: scenario
    for scenario in (
        Scenario(
            "smoke", "seconds-long end-to-end check (CI)",
            rate=2_000, duration_s=3.0, batch=50, producers=2, consumers=1, topics=2,
            delay_min_ms=200, delay_max_ms=1_500, grace_ms=500, drain_timeout_ms=15_000,
        ),
        Scenario(
            "tdmq", "TDMQ's shape: 14,000 sends/s, delay 30 s..10 min, one consumer",
            rate=14_000, duration_s=60.0, batch=100, producers=4, consumers=1, topics=1,
            body_bytes=128, delay_min_ms=30 * SECOND_MS, delay_max_ms=10 * MINUTE_MS,
        ),
        Scenario(
            "tdmq-threads", "TDMQ's producer shape: 16 threads, single sends, batched client-side",
            rate=14_000, duration_s=60.0, batch=1, producers=1, producer_threads=16,
            consumers=1, topics=1, body_bytes=128, delay_min_ms=30 * SECOND_MS,
            delay_max_ms=10 * MINUTE_MS, max_outstanding=5_000,
        ),
        Scenario(
            "overload", "about twice what one process sustains: 40,000 sends/s, delay "
            "3 s..60 s; the target: the excess slowed or refused at the producers, not the fires",
            rate=40_000, duration_s=60.0, batch=100, producers=4, consumers=1, topics=1,
            body_bytes=128, delay_min_ms=3 * SECOND_MS, delay_max_ms=60 * SECOND_MS,
            fire_p999_target_ms=50, send_overrun_ms=0,  # behind at the end: stop, expected
        ),
        Scenario(
            "burst", "N timers due in the same second",
            rate=50_000, duration_s=20.0, count=1_000_000, batch=1_000, producers=2,
            consumers=1, topics=1, body_bytes=32, burst_window_ms=1_000,
            burst_lead_ms=10_000, max_in_flight=20_000,
        ),
        Scenario(
            "cancel", "a share of timers cancelled before firing; none may be delivered",
            rate=2_000, duration_s=10.0, batch=100, producers=2, consumers=1, topics=2,
            delay_min_ms=5_000, delay_max_ms=15_000, cancel_share=0.3,
        ),
        Scenario(
            "backlog", "fill far-future timers; storage bytes per timer and RSS",
            rate=100_000, duration_s=100.0, count=10_000_000, batch=1_000, producers=2,
            consumers=1, topics=4, body_bytes=64, delay_min_ms=DAY_MS,
            delay_max_ms=30 * DAY_MS, expect_delivery=False, send_overrun_ms=600_000,
        ),
    )
}  # fmt: skip


def scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise ScenarioError(f"scenario={name!r}: choose one of {', '.join(SCENARIOS)}") from None
