"""All settings in one frozen dataclass, validated once when it is made.

Loading them (flags, environment, TOML) is the server's job; this module only says what
they are, and `timerwheel.wheels.settings_checks` whether a combination is sane. Every
error message shows the bad value.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from timerwheel.durations import DAY_MS, HOUR_MS, MINUTE_MS, SECOND_MS
from timerwheel.wheels.retry import RetryKind, RetryPolicy
from timerwheel.wheels.settings_checks import settings_problem
from timerwheel.wheels.topic_policy import TopicSettings

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
    # A call whose request has not arrived this long after the server starts reading it is
    # cancelled, freeing its thread and its place to read (timerwheel.security.read_timeout):
    # without it, headers sent and the request never held both for as long as the call.
    request_read_timeout_ms: int = 10 * SECOND_MS

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
        if (problem := settings_problem(self)) is not None:
            raise SettingsError(problem)

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
