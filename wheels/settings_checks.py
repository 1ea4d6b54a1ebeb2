"""Whether a combination of settings is sane: the rules `Settings` is checked against.

Apart from the dataclass so that `timerwheel.wheels.settings` stays the list of what
each setting is and why its default, and these rules can grow without crowding it.
Pure: each check returns the problem, naming the setting and its bad value, or None;
`Settings` raises the first it finds (as `timerwheel.wheels.topic_policy` does). The
checks run in order, and a later one may rely on the earlier ones having passed (that
a field is a positive int before it is added up, say).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timerwheel.durations import DAY_MS, HOUR_MS, MINUTE_MS
from timerwheel.wheels.admission import admit_due_load_problem, admit_fire_lag_problem
from timerwheel.wheels.call_room import fixed_calls
from timerwheel.wheels.retry import check_policy
from timerwheel.wheels.topic_policy import topics_problem

if TYPE_CHECKING:
    from timerwheel.wheels.settings import Settings

MIN_CLOCK_STEP_MS = 10  # clock readings are whole ms: a smaller threshold would be noise
MAX_GIL_SWITCH_INTERVAL_MS = 100  # beyond, a waiting thread could stall for a tenth of a second
MAX_CASCADE_PACE_PERCENT = 90  # the last tenth of a lead is left to finish the slot in
MAX_FIRE_TICK_MS = 1_000  # RocketMQ 5's default timer precision; coarser would not be "on time"

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
    "request_read_timeout_ms",
)  # fmt: skip


def settings_problem(settings: Settings) -> str | None:
    """The first problem of `settings`, or None when the service can run with them."""
    for check in (_single_fields, _delivery_rules, _limits_and_leads):
        if (problem := check(settings)) is not None:
            return problem
    return None


def _single_fields(settings: Settings) -> str | None:
    """Each field on its own (its type and range), and the ports that must not collide."""
    if (problem := _positive_problem(settings, _POSITIVE_FIELDS)) is not None:
        return problem
    if not isinstance(settings.workers, int) or not 0 <= settings.workers <= 256:
        return f"workers={settings.workers!r}: must be 0..256 (0: one process)"
    if not isinstance(settings.clock_offset_ms, int) or abs(settings.clock_offset_ms) > DAY_MS:
        return f"clock_offset_ms={settings.clock_offset_ms!r}: must be an int within a day"
    threshold = settings.clock_step_threshold_ms
    if type(threshold) is not int or not MIN_CLOCK_STEP_MS <= threshold <= HOUR_MS:
        return (
            f"clock_step_threshold_ms={threshold!r}: must be {MIN_CLOCK_STEP_MS}ms..1h "
            "(readings are whole ms: smaller would be noise)"
        )
    interval = settings.gil_switch_interval_ms
    if type(interval) is not int or not 1 <= interval <= MAX_GIL_SWITCH_INTERVAL_MS:
        return f"gil_switch_interval_ms={interval!r}: must be 1..{MAX_GIL_SWITCH_INTERVAL_MS}"
    hold = settings.first_delivery_hold_ms
    if type(hold) is not int or not 0 <= hold <= MINUTE_MS:
        return f"first_delivery_hold_ms={hold!r}: must be 0..1m (0: handed over at once)"
    tick = settings.fire_tick_ms
    if type(tick) is not int or not 1 <= tick <= MAX_FIRE_TICK_MS:
        return (
            f"fire_tick_ms={tick!r}: must be 1..{MAX_FIRE_TICK_MS} "
            "(how long timers due together may wait for one group commit)"
        )
    if not 0 <= settings.port <= 65535:
        return f"port={settings.port}: must be 0..65535"
    for check in (_metrics_problem, _console_problem):
        if (problem := check(settings)) is not None:
            return problem
    if (problem := admit_fire_lag_problem(settings.admit_fire_lag_ms)) is not None:
        return problem
    if (problem := admit_due_load_problem(settings.admit_due_load_pct)) is not None:
        return problem
    if not settings.data_dir:
        return "data_dir='': must name a directory"
    return None


def _delivery_rules(settings: Settings) -> str | None:
    """Delay levels, attempt limits, retry policies (the server's and each topic's) and
    the in-flight window."""
    if not settings.delay_levels_ms:
        return "delay_levels_ms=(): at least one level is needed"
    for i, level_ms in enumerate(settings.delay_levels_ms, start=1):
        if not isinstance(level_ms, int) or level_ms <= 0:
            return f"delay_levels_ms[level {i}]={level_ms!r}: must be a positive int"
    if not isinstance(settings.max_attempts, int) or settings.max_attempts < 0:
        return f"max_attempts={settings.max_attempts!r}: must be 0 (unlimited) or more"
    for check in (_retry_problem, topics_problem):
        if (problem := check(settings)) is not None:
            return problem
    if settings.max_in_flight_default > settings.max_in_flight_limit:
        return (
            f"max_in_flight_default={settings.max_in_flight_default}: must not exceed "
            f"max_in_flight_limit ({settings.max_in_flight_limit})"
        )
    return None


def _limits_and_leads(settings: Settings) -> str | None:
    """Fields that must fit each other: request sizes, cascade leads, the gRPC pools."""
    smallest_request = settings.max_body_bytes + settings.max_properties_bytes + 64 * 1024
    if settings.max_request_bytes < smallest_request:
        return (
            f"max_request_bytes={settings.max_request_bytes}: must be at least "
            f"{smallest_request} (max_body_bytes + max_properties_bytes + 64 KiB) "
            "so one largest message fits in a request"
        )
    if settings.max_inflight_request_bytes < settings.max_request_bytes:
        return (
            f"max_inflight_request_bytes={settings.max_inflight_request_bytes}: must be at "
            f"least max_request_bytes ({settings.max_request_bytes}) so the largest request "
            "can be served"
        )
    if settings.minute_cascade_lead_ms >= MINUTE_MS:
        return f"minute_cascade_lead_ms={settings.minute_cascade_lead_ms}: must be under one minute"
    if not settings.minute_cascade_lead_ms < settings.hour_cascade_lead_ms < HOUR_MS:
        return (
            f"hour_cascade_lead_ms={settings.hour_cascade_lead_ms}: must be above "
            f"minute_cascade_lead_ms ({settings.minute_cascade_lead_ms}) and under one hour"
        )
    if (problem := _rpc_room_problem(settings)) is not None:
        return problem
    share = settings.caller_thread_share_percent
    if type(share) is not int or not 1 <= share <= 100:
        return f"caller_thread_share_percent={share!r}: must be 1..100"
    pace = settings.cascade_pace_percent
    if type(pace) is not int or not 0 <= pace <= MAX_CASCADE_PACE_PERCENT:
        return (
            f"cascade_pace_percent={pace!r}: must be 0..{MAX_CASCADE_PACE_PERCENT} (0: no pacing)"
        )
    return None


def _positive_problem(settings: Settings, names: tuple[str, ...]) -> str | None:
    for name in names:
        value = getattr(settings, name)
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            return f"{name}={value!r}: must be a positive integer"
    return None


def _rpc_room_problem(settings: Settings) -> str | None:
    """max_concurrent_rpcs is shared between the server's pools (timerwheel.wheels.call_room):
    the streams' and the probes' parts and the unary and settle threads must leave room
    for calls waiting for a unary or settle thread, or those would be refused at once."""
    if settings.max_health_per_peer > max(settings.max_health_checks, settings.max_health_watches):
        return (
            f"max_health_per_peer={settings.max_health_per_peer}: must not exceed "
            f"max_health_checks ({settings.max_health_checks}) or max_health_watches "
            f"({settings.max_health_watches})"
        )
    fixed = fixed_calls(settings)
    if settings.max_concurrent_rpcs <= fixed:
        return (
            f"max_concurrent_rpcs={settings.max_concurrent_rpcs}: must be above the {fixed} "
            "calls the server's pools take before any waits for a unary or settle thread "
            "(3 * grpc_workers + max_subscribers + settle_workers + 2 * (max_health_checks "
            "+ max_health_watches + max_reflection_streams + 2))"
        )
    return None


def _retry_problem(settings: Settings) -> str | None:
    if settings.retry_backoff not in ("exponential", "fixed"):
        return f"retry_backoff={settings.retry_backoff!r}: must be 'exponential' or 'fixed'"
    for name in ("retry_initial_ms", "retry_max_ms", "retry_jitter_percent"):
        value = getattr(settings, name)
        if type(value) is not int:
            return f"{name}={value!r}: must be an integer"
    multiplier = settings.retry_multiplier
    if isinstance(multiplier, bool) or not isinstance(multiplier, int | float):
        return f"retry_multiplier={multiplier!r}: must be a number"
    problem = check_policy(settings.retry_policy())
    if problem is not None:
        field, value, why = problem
        return f"retry_{field}={value!r}: {why}"
    return None


def _console_problem(settings: Settings) -> str | None:
    port = settings.console_port
    if not isinstance(port, int) or isinstance(port, bool) or not -1 <= port <= 65535:
        return f"console_port={port!r}: must be -1 (off), 0 (a free port) or 1..65535"
    if not settings.console_host:
        return "console_host='': must name an address (127.0.0.1: loopback)"
    for name, other, host in (
        ("port", settings.port, settings.host),
        ("metrics_port", settings.metrics_port, settings.metrics_host),
    ):  # fmt: skip
        if port > 0 and port == other and host == settings.console_host:
            return f"console_port={port}: is the {name} too; give another"
    return None


def _metrics_problem(settings: Settings) -> str | None:
    port = settings.metrics_port
    if not isinstance(port, int) or isinstance(port, bool) or not -1 <= port <= 65535:
        return f"metrics_port={port!r}: must be -1 (off), 0 (a free port) or 1..65535"
    if port > 0 and port == settings.port and settings.metrics_host == settings.host:
        return f"metrics_port={port}: is the gRPC port ({settings.port}); give another"
    if not settings.metrics_host:
        return "metrics_host='': must name an address (127.0.0.1: loopback)"
    top = settings.metrics_top_topics
    if not isinstance(top, int) or isinstance(top, bool) or not 1 <= top <= 1000:
        return f"metrics_top_topics={top!r}: must be 1..1000"
    return None
