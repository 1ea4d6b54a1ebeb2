"""All settings in one frozen dataclass, validated once when it is made.

Loading them (flags, environment, TOML) is the server's job; this module only says what
they are and whether a combination is sane. Every error message shows the bad value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from timerwheel.durations import DAY_MS, HOUR_MS, MINUTE_MS, SECOND_MS
from timerwheel.wheels.admission import admit_due_load_problem, admit_fire_lag_problem
from timerwheel.wheels.retry import RetryKind, RetryPolicy, check_policy
from timerwheel.wheels.topic_policy import TopicSettings, topics_problem

MIN_CLOCK_STEP_MS = 10  # clock readings are whole ms: a smaller threshold would be noise
MAX_GIL_SWITCH_INTERVAL_MS = 100  # beyond, a waiting thread could stall for a tenth of a second
MAX_CASCADE_PACE_PERCENT = 90  # the last tenth of a lead is left to finish the slot in
MAX_FIRE_TICK_MS = 1_000  # RocketMQ 5's default timer precision; coarser would not be "on time"

# RocketMQ 4 default messageDelayLevel:
# "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".
ROCKETMQ_DELAY_LEVELS_MS: tuple[int, ...] = (
    1 * SECOND_MS, 5 * SECOND_MS, 10 * SECOND_MS, 30 * SECOND_MS,
    1 * MINUTE_MS, 2 * MINUTE_MS, 3 * MINUTE_MS, 4 * MINUTE_MS, 5 * MINUTE_MS,
    6 * MINUTE_MS, 7 * MINUTE_MS, 8 * MINUTE_MS, 9 * MINUTE_MS, 10 * MINUTE_MS,
    20 * MINUTE_MS, 30 * MINUTE_MS, 1 * HOUR_MS, 2 * HOUR_MS,
)  # fmt: skip


class SettingsError(ValueError):
    """A setting has a value the service cannot run with."""


@dataclass(frozen=True)
class Settings:
    # Where and how to serve.
    data_dir: str = "./data"
    host: str = "127.0.0.1"
    port: int = 7070
    # Processes (timerwheel.procs.supervisor): 0 runs the whole server in this one process (engine,
    # delivery and gRPC share one GIL); N >= 1 runs an engine process, a delivery process
    # and N gRPC worker processes sharing the port. 0 is the default because on a
    # 2-core machine the split costs more than it frees (docs/lab-log.md has the runs).
    workers: int = 0

    # For tests only: the server's wall clock runs this far ahead of (or behind) the real
    # one, so a test can pin the time of day it runs at (tests/system/test_time_of_day.py).
    clock_offset_ms: int = 0
    # A wall-clock jump bigger than this (against the monotonic clock, between two
    # readings) is a clock step: logged, counted in Stats (timerwheel.wheels.clock_step; what the
    # service does about it: docs/engine.md, "Clock steps").
    clock_step_threshold_ms: int = SECOND_MS

    # Durability: WAL is always on; sync makes every group commit a caller waits on an
    # fsync (timerwheel.engine.writer, "Which commits fsync").
    sync_writes: bool = True
    # How long a thread may keep the GIL while another waits, in each server process
    # (timerwheel.procs.gil: why 1 and not CPython's 5).
    gil_switch_interval_ms: int = 1

    # What a producer may ask for.
    max_delay_ms: int = 400 * DAY_MS
    max_past_ms: int = DAY_MS  # older deliver times are a client bug, not "fire now"
    max_topic_len: int = 127
    max_body_bytes: int = 4 * 1024 * 1024
    max_properties: int = 64
    max_property_key_len: int = 128
    max_property_value_len: int = 16 * 1024
    max_properties_bytes: int = 64 * 1024
    max_batch_messages: int = 10_000
    delay_levels_ms: tuple[int, ...] = ROCKETMQ_DELAY_LEVELS_MS

    # Record lifecycle.
    retention_ms: int = 3 * DAY_MS  # ACKED and CANCELLED stay queryable this long

    # Cascades run this far ahead of the boundary they cross (see timerwheel.wheels.scheduler). A
    # timer due within the lead is placed in the lower wheel at once and is never
    # cascaded: with a lead of most of a minute, timers sent seconds to a minute ahead go
    # straight to the second wheel, so a minute's cascade moves a small fraction of what
    # it would with a lead of a few seconds, and the engine spends that much less on moves.
    minute_cascade_lead_ms: int = 50 * SECOND_MS
    hour_cascade_lead_ms: int = 5 * MINUTE_MS
    # A started cascade spreads its moves evenly over this share of its lead, in percent
    # (timerwheel.wheels.scheduler, "Pacing"; `cascade_finish_ahead_ms`); 0: chunks back to back.
    cascade_pace_percent: int = 80

    # Fire commits at least a tick apart (timerwheel.wheels.scheduler, "The fire tick"): the timers
    # due within it fire together; a timer due after a quiet spell fires on time.
    fire_tick_ms: int = 4

    # Work per writer iteration, so one huge slot never blocks sends or firing.
    # Small: a cascade's chunks run back to back, and each holds the fires and deliveries
    # behind it. 250 halves the fire tail that 2,000 gives, for the same CPU; 100 does
    # worse at high rates (docs/lab-log.md has the runs).
    cascade_chunk: int = 250
    fire_chunk: int = 10_000
    sweep_chunk: int = 10_000
    max_group_ops: int = 20_000  # operations in one group commit

    # Backpressure.
    max_queued_ops: int = 200_000  # timers waiting for the writer
    max_unacked: int = 1_000_000  # fired, not acked, per service
    # Sends are refused (RESOURCE_EXHAUSTED, before validation) while the firing loop runs
    # more than this late, so fires stay on time and producers feel the excess
    # (timerwheel.wheels.admission); 0: never.
    admit_fire_lag_ms: int = 20
    # And while the fires due in the coming seconds plus the sends, at their measured
    # costs, would take more than this % of a core (timerwheel.wheels.admission,
    # "admission by due load"); 0: never.
    admit_due_load_pct: int = 85

    # Delivery.
    ack_timeout_ms: int = 30 * SECOND_MS
    max_in_flight_default: int = 1_000
    max_in_flight_limit: int = 100_000  # the most a subscriber may ask for
    # Messages in one DeliveryBatch stream item. Each is a round trip from the stream's
    # worker to the delivery process: small batches leave a large burst bound by the
    # round trips with no process busy; larger ones deliver it sooner (docs/lab-log.md).
    delivery_batch_max: int = 2_000
    delivery_batch_bytes: int = 1024 * 1024  # body bytes per batch (one message at least)
    # Delivery attempts of a message without an ack before it moves to its dead-letter
    # topic, when its send does not say (SendRequest.max_attempts); 0: unlimited.
    max_attempts: int = 0
    # The retry policy of messages whose send names none (SendRequest.retry;
    # timerwheel.wheels.retry): after an ack timeout or a nack without its own
    # redeliver_after_ms, the next delivery waits retry_initial_ms, times retry_multiplier
    # for each failed attempt before it ("exponential"; "fixed": always retry_initial_ms),
    # at most retry_max_ms, shortened by a random share of up to retry_jitter_percent.
    # From 1s doubling to a 5m cap, a poison message costs a handful of deliveries in its
    # first minutes and then one every few minutes, while a passing fault (a restarting
    # database) is retried within seconds. retry_initial_ms = 0: redelivered at once.
    retry_backoff: str = "exponential"
    retry_initial_ms: int = SECOND_MS
    retry_max_ms: int = 5 * MINUTE_MS
    retry_multiplier: float = 2.0
    retry_jitter_percent: int = 20
    # Per-topic defaults (timerwheel.wheels.topic_policy): a topic's max_attempts and retry
    # fields, for its messages whose send names none; what a topic leaves out is the above.
    topics: tuple[TopicSettings, ...] = ()
    # Every delivery attempt is an event of its message's trace: one RocksDB entry a
    # message, about a tenth of the engine's instructions in a burst and a fifth of the
    # data it writes. False: first attempts are not written; redeliveries and failed
    # attempts still are, so the attempt counts that survive a restart stay exact except
    # for a first attempt in flight across it (timerwheel.delivery.trace).
    trace_first_deliveries: bool = True
    # A first attempt's event waits in the delivery hub this long for its Ack, which
    # carries it to the engine and into the record it rewrites: no call to the engine
    # for the batch and no trace entry (timerwheel.delivery.first_deliveries). Longer: fewer for
    # slow consumers; a delivery side killed with -9 forgets up to this much of them (those
    # messages, un-acked, are delivered again as attempt 1). 0: handed over at once.
    first_delivery_hold_ms: int = 5 * SECOND_MS

    # gRPC serving: unary calls run on grpc_workers threads; each Subscribe stream holds a
    # thread of a second pool for its lifetime (timerwheel.server.stream_pool), so streams can never
    # starve unary calls.
    grpc_workers: int = 32
    # Ack and Nack run on threads of their own (timerwheel.server.settle_pool): a consumer's acks
    # never wait behind queued sends.
    settle_workers: int = 8
    # The share of those threads (unary, settle) one caller may hold at once: the rest stay
    # free for other tokens (timerwheel.security.fair_pool; docs/security.md "Memory budget").
    caller_thread_share_percent: int = 75
    max_subscribers: int = 256
    max_request_bytes: int = 16 * 1024 * 1024  # largest request (a SendBatch) accepted
    shutdown_grace_ms: int = 10 * SECOND_MS  # SIGTERM: how long in-flight calls may finish

    # Storage tuning. Wheel memtables are kept small: their keys arrive in random order
    # (deliver times spread over weeks), and a skiplist that fits the CPU cache takes them
    # several times faster (docs/engine.md, "Storage layout"); flushing them is background work.
    block_cache_bytes: int = 64 * 1024 * 1024
    write_buffer_bytes: int = 32 * 1024 * 1024
    wheel_write_buffer_bytes: int = 8 * 1024 * 1024

    # Resource bounds: what one client can make the server hold (docs/security.md, "Memory
    # budget", adds them up). Bytes, not counts, wherever a count would let big bodies in.
    fired_cache_bytes: int = 64 * 1024 * 1024  # fired records kept in memory for delivery
    max_list_bytes: int = 8 * 1024 * 1024  # records read for one List page (one at least)
    max_ack_ids: int = 10_000  # ids in one Ack call, and in one Nack call
    # Request bytes held at once by one gRPC process (a worker): a request that would go
    # over is refused at once with RESOURCE_EXHAUSTED instead of waiting in memory.
    max_inflight_request_bytes: int = 32 * 1024 * 1024
    # Bodies a delivery hub holds at once: read ahead, in flight, awaiting redelivery. Over
    # it, dispatchers read no more until acks free some (one message at least per topic).
    max_delivery_bytes: int = 64 * 1024 * 1024
    max_concurrent_rpcs: int = 512  # per gRPC process: calls beyond it are refused
    max_subscribers_per_peer: int = 64  # Subscribe streams of one connection (or token)
    # Calls anyone may make without a token run on a small pool of their own, within these
    # budgets (timerwheel.server.stream_pool, docs/security.md "Health and reflection"): over
    # one, a call is refused at once with RESOURCE_EXHAUSTED, and never takes a thread
    # TimerService needs. Check is what load balancers and probes should call.
    max_health_checks: int = 8  # health Check calls being answered at once
    max_health_watches: int = 8  # open health Watch streams, each holding a thread
    max_health_per_peer: int = 2  # of each of those, per connection
    max_reflection_streams: int = 2  # open reflection streams (a token needed, if tokens)
    # HTTP/2 keepalive (timerwheel.server.keepalive): a peer that stops answering pings is
    # dropped after keepalive_time_ms + keepalive_timeout_ms; clients may ping this often.
    keepalive_time_ms: int = 10 * SECOND_MS
    keepalive_timeout_ms: int = 5 * SECOND_MS
    keepalive_min_ping_interval_ms: int = 10 * SECOND_MS
    max_connection_idle_ms: int = 5 * MINUTE_MS  # no call that long: closed (GOAWAY)

    # Prometheus metrics (docs/metrics.md): /metrics over HTTP on metrics_host:metrics_port.
    # Off by default (-1): an endpoint without TLS or tokens is opened only when asked for;
    # 0 picks a free port. Loopback by default, whatever `host` is.
    metrics_port: int = -1
    metrics_host: str = "127.0.0.1"
    metrics_top_topics: int = 20  # topics labelled in per-topic gauges; the rest: "other"

    # The web console (docs/console.md) on console_host:console_port, a client of this
    # server's own gRPC API. Off by default (-1), like metrics; 0 picks a free port.
    console_port: int = -1
    console_host: str = "127.0.0.1"

    def __post_init__(self) -> None:
        _check_positive(self, _POSITIVE_FIELDS)
        if not isinstance(self.workers, int) or not 0 <= self.workers <= 256:
            raise SettingsError(f"workers={self.workers!r}: must be 0..256 (0: one process)")
        if not isinstance(self.clock_offset_ms, int) or abs(self.clock_offset_ms) > DAY_MS:
            raise SettingsError(
                f"clock_offset_ms={self.clock_offset_ms!r}: must be an int within a day"
            )
        threshold = self.clock_step_threshold_ms
        if type(threshold) is not int or not MIN_CLOCK_STEP_MS <= threshold <= HOUR_MS:
            raise SettingsError(
                f"clock_step_threshold_ms={threshold!r}: must be {MIN_CLOCK_STEP_MS}ms..1h "
                "(readings are whole ms: smaller would be noise)"
            )
        interval = self.gil_switch_interval_ms
        if type(interval) is not int or not 1 <= interval <= MAX_GIL_SWITCH_INTERVAL_MS:
            raise SettingsError(
                f"gil_switch_interval_ms={interval!r}: must be 1..{MAX_GIL_SWITCH_INTERVAL_MS}"
            )
        hold = self.first_delivery_hold_ms
        if type(hold) is not int or not 0 <= hold <= MINUTE_MS:
            raise SettingsError(
                f"first_delivery_hold_ms={hold!r}: must be 0..1m (0: handed over at once)"
            )
        tick = self.fire_tick_ms
        if type(tick) is not int or not 1 <= tick <= MAX_FIRE_TICK_MS:
            raise SettingsError(
                f"fire_tick_ms={tick!r}: must be 1..{MAX_FIRE_TICK_MS} "
                "(how long timers due together may wait for one group commit)"
            )
        if not 0 <= self.port <= 65535:
            raise SettingsError(f"port={self.port}: must be 0..65535")
        _check_metrics(self)
        _check_console(self)
        if (problem := admit_fire_lag_problem(self.admit_fire_lag_ms)) is not None:
            raise SettingsError(problem)
        if (problem := admit_due_load_problem(self.admit_due_load_pct)) is not None:
            raise SettingsError(problem)
        if not self.data_dir:
            raise SettingsError("data_dir='': must name a directory")
        if not self.delay_levels_ms:
            raise SettingsError("delay_levels_ms=(): at least one level is needed")
        for i, level_ms in enumerate(self.delay_levels_ms, start=1):
            if not isinstance(level_ms, int) or level_ms <= 0:
                raise SettingsError(
                    f"delay_levels_ms[level {i}]={level_ms!r}: must be a positive int"
                )
        if not isinstance(self.max_attempts, int) or self.max_attempts < 0:
            raise SettingsError(
                f"max_attempts={self.max_attempts!r}: must be 0 (unlimited) or more"
            )
        _check_retry(self)
        problem = topics_problem(self)
        if problem is not None:
            raise SettingsError(problem)
        if self.max_in_flight_default > self.max_in_flight_limit:
            raise SettingsError(
                f"max_in_flight_default={self.max_in_flight_default}: must not exceed "
                f"max_in_flight_limit ({self.max_in_flight_limit})"
            )
        smallest_request = self.max_body_bytes + self.max_properties_bytes + 64 * 1024
        if self.max_request_bytes < smallest_request:
            raise SettingsError(
                f"max_request_bytes={self.max_request_bytes}: must be at least "
                f"{smallest_request} (max_body_bytes + max_properties_bytes + 64 KiB) "
                "so one largest message fits in a request"
            )
        if self.max_inflight_request_bytes < self.max_request_bytes:
            raise SettingsError(
                f"max_inflight_request_bytes={self.max_inflight_request_bytes}: must be at "
                f"least max_request_bytes ({self.max_request_bytes}) so the largest request "
                "can be served"
            )
        if self.minute_cascade_lead_ms >= MINUTE_MS:
            raise SettingsError(
                f"minute_cascade_lead_ms={self.minute_cascade_lead_ms}: must be under one minute"
            )
        if not self.minute_cascade_lead_ms < self.hour_cascade_lead_ms < HOUR_MS:
            raise SettingsError(
                f"hour_cascade_lead_ms={self.hour_cascade_lead_ms}: must be above "
                f"minute_cascade_lead_ms ({self.minute_cascade_lead_ms}) and under one hour"
            )
        _check_rpc_room(self)
        share = self.caller_thread_share_percent
        if type(share) is not int or not 1 <= share <= 100:
            raise SettingsError(f"caller_thread_share_percent={share!r}: must be 1..100")
        pace = self.cascade_pace_percent
        if type(pace) is not int or not 0 <= pace <= MAX_CASCADE_PACE_PERCENT:
            raise SettingsError(
                f"cascade_pace_percent={pace!r}: must be 0..{MAX_CASCADE_PACE_PERCENT} "
                "(0: no pacing)"
            )

    def cascade_finish_ahead_ms(self) -> tuple[int, int]:
        """How long before its slot each cascade's pace ends, minute and hour: the rest of
        its lead. The hour's ends before the next hour's first minute cascade starts, so
        that one never waits for it."""
        rest = 100 - self.cascade_pace_percent
        minute = self.minute_cascade_lead_ms * rest // 100
        hour = max(self.hour_cascade_lead_ms * rest // 100, self.minute_cascade_lead_ms)
        return minute, hour

    def retry_policy(self) -> RetryPolicy:
        """The retry policy of a message whose send names none."""
        kind = RetryKind.FIXED if self.retry_backoff == "fixed" else RetryKind.EXPONENTIAL
        return RetryPolicy(
            kind, self.retry_initial_ms, self.retry_max_ms, float(self.retry_multiplier),
            self.retry_jitter_percent,
        )  # fmt: skip

    def replace(self, **changes: Any) -> Settings:
        """A copy with `changes`, validated again."""
        return dataclasses.replace(self, **changes)


_POSITIVE_FIELDS = (
    "max_delay_ms", "max_past_ms", "max_topic_len", "max_body_bytes", "max_properties",
    "max_property_key_len", "max_property_value_len", "max_properties_bytes",
    "max_batch_messages", "retention_ms", "minute_cascade_lead_ms", "hour_cascade_lead_ms",
    "cascade_chunk", "fire_chunk", "sweep_chunk", "max_group_ops", "max_queued_ops",
    "max_unacked", "ack_timeout_ms", "max_in_flight_default", "block_cache_bytes",
    "write_buffer_bytes", "wheel_write_buffer_bytes", "max_in_flight_limit",
    "delivery_batch_max", "delivery_batch_bytes", "grpc_workers", "settle_workers",
    "max_subscribers",
    "max_request_bytes", "shutdown_grace_ms", "fired_cache_bytes", "max_list_bytes",
    "max_delivery_bytes",
    "max_ack_ids", "max_inflight_request_bytes", "max_concurrent_rpcs",
    "max_subscribers_per_peer", "max_health_checks", "max_health_watches",
    "max_health_per_peer", "max_reflection_streams", "keepalive_time_ms",
    "keepalive_timeout_ms", "keepalive_min_ping_interval_ms", "max_connection_idle_ms",
)  # fmt: skip


def _check_positive(settings: Settings, names: tuple[str, ...]) -> None:
    for name in names:
        value = getattr(settings, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            raise SettingsError(f"{name}={value!r}: must be a positive integer")


def _check_rpc_room(settings: Settings) -> None:
    """Every call the server's pools can run at once must fit under max_concurrent_rpcs:
    grpcio refuses *every* call beyond it, so streams the server admits by design (or the
    health and reflection calls anyone may make) must never be enough to reach it."""
    if settings.max_health_per_peer > max(settings.max_health_checks, settings.max_health_watches):
        raise SettingsError(
            f"max_health_per_peer={settings.max_health_per_peer}: must not exceed "
            f"max_health_checks ({settings.max_health_checks}) or max_health_watches "
            f"({settings.max_health_watches})"
        )
    threads = (
        2 * settings.grpc_workers + settings.max_subscribers + settings.settle_workers
        + settings.max_health_checks + settings.max_health_watches
        + settings.max_reflection_streams
    )  # fmt: skip
    if settings.max_concurrent_rpcs <= threads:
        raise SettingsError(
            f"max_concurrent_rpcs={settings.max_concurrent_rpcs}: must be above the {threads} "
            "calls the server's threads can run at once (2 * grpc_workers + max_subscribers "
            "+ settle_workers + max_health_checks + max_health_watches + "
            "max_reflection_streams), or streams alone could make it refuse every call"
        )


def _check_retry(settings: Settings) -> None:
    if settings.retry_backoff not in ("exponential", "fixed"):
        raise SettingsError(
            f"retry_backoff={settings.retry_backoff!r}: must be 'exponential' or 'fixed'"
        )
    for name in ("retry_initial_ms", "retry_max_ms", "retry_jitter_percent"):
        value = getattr(settings, name)
        if type(value) is not int:
            raise SettingsError(f"{name}={value!r}: must be an integer")
    multiplier = settings.retry_multiplier
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
        raise SettingsError(f"retry_multiplier={multiplier!r}: must be a number")
    problem = check_policy(settings.retry_policy())
    if problem is not None:
        field, value, why = problem
        raise SettingsError(f"retry_{field}={value!r}: {why}")


def _check_console(settings: Settings) -> None:
    port = settings.console_port
    if not isinstance(port, int) or isinstance(port, bool) or not -1 <= port <= 65535:
        raise SettingsError(f"console_port={port!r}: must be -1 (off), 0 (a free port) or 1..65535")
    if not settings.console_host:
        raise SettingsError("console_host='': must name an address (127.0.0.1: loopback)")
    for name, other, host in (
        ("port", settings.port, settings.host),
        ("metrics_port", settings.metrics_port, settings.metrics_host),
    ):  # fmt: skip
        if port > 0 and port == other and host == settings.console_host:
            raise SettingsError(f"console_port={port}: is the {name} too; give another")


def _check_metrics(settings: Settings) -> None:
    port = settings.metrics_port
    if not isinstance(port, int) or isinstance(port, bool) or not -1 <= port <= 65535:
        raise SettingsError(f"metrics_port={port!r}: must be -1 (off), 0 (a free port) or 1..65535")
    if port > 0 and port == settings.port and settings.metrics_host == settings.host:
        raise SettingsError(
            f"metrics_port={port}: is the gRPC port ({settings.port}); give another"
        )
    if not settings.metrics_host:
        raise SettingsError("metrics_host='': must name an address (127.0.0.1: loopback)")
    top = settings.metrics_top_topics
    if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= 1000:
        raise SettingsError(f"metrics_top_topics={top!r}: must be 1..1000")
