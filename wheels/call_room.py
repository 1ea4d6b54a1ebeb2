"""How grpcio's global limit on calls is shared between the gRPC server's pools.

grpcio counts every call it has handed to a thread pool and not seen end, running or
waiting for a thread, and once that count reaches its `maximum_concurrent_rpcs` it
refuses every new call, "Concurrent RPC limit exceeded!": a well-behaved tenant's Send
and a load balancer's health Check alike. Several tokens flooding at once could fill it,
each within its own caps.

So the count is split ahead of time: each of the server's four pools (unary calls, Ack
and Nack, streams, health and reflection) takes at most its part of `max_concurrent_rpcs`
calls at once, and refuses, fairly, beyond it (timerwheel.security.fair_pool). The parts
add up to `max_concurrent_rpcs`, and grpcio is given one more: its limit is never
reached, and no flood in one pool takes a place of another's.

- streams: a thread for every stream the delivery hub admits (`max_subscribers`) and
  `grpc_workers` more to refuse on, and as many places again waiting for those;
- health and reflection: a thread for every place of their budgets, the spares that
  refusals run on, and as many places again waiting for those;
- unary and settle: their threads, and what is left of `max_concurrent_rpcs` as waiting
  places, shared in proportion to their threads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

SPARE_PROBE_THREADS = 2  # threads of the probes' pool no admitted call can hold


class RpcSettings(Protocol):
    """The settings the split is made of (timerwheel.wheels.settings.Settings)."""

    @property
    def grpc_workers(self) -> int: ...
    @property
    def settle_workers(self) -> int: ...
    @property
    def max_subscribers(self) -> int: ...
    @property
    def max_health_checks(self) -> int: ...
    @property
    def max_health_watches(self) -> int: ...
    @property
    def max_reflection_streams(self) -> int: ...
    @property
    def max_concurrent_rpcs(self) -> int: ...


@dataclass(frozen=True)
class CallRoom:
    """Calls each pool takes at once, running and waiting; `waiting` is what is left of
    `max_concurrent_rpcs` for the unary and settle pools' waiting calls (below 1: the
    settings leave none, which Settings refuses)."""

    unary: int
    settle: int
    streams: int
    probes: int
    waiting: int

    @property
    def total(self) -> int:
        return self.unary + self.settle + self.streams + self.probes


def probe_threads(settings: RpcSettings) -> int:
    """A thread for every place of the probes' budgets, and spares for refusals."""
    return (
        settings.max_health_checks + settings.max_health_watches
        + settings.max_reflection_streams + SPARE_PROBE_THREADS
    )  # fmt: skip


def stream_threads(settings: RpcSettings) -> int:
    """A thread for every stream admitted, and `grpc_workers` more to refuse others on."""
    return settings.max_subscribers + settings.grpc_workers


def call_room(settings: RpcSettings) -> CallRoom:
    """Each pool's part of `max_concurrent_rpcs` (see the module docstring)."""
    streams = 2 * stream_threads(settings) - settings.max_subscribers
    probes = 2 * probe_threads(settings)
    threads = settings.grpc_workers + settings.settle_workers
    waiting = settings.max_concurrent_rpcs - streams - probes - threads
    settle_waiting = max(0, waiting) * settings.settle_workers // threads
    unary_waiting = max(0, waiting) - settle_waiting
    return CallRoom(
        settings.grpc_workers + unary_waiting, settings.settle_workers + settle_waiting,
        streams, probes, waiting,
    )  # fmt: skip


def fixed_calls(settings: RpcSettings) -> int:
    """The calls the pools take before any waits for a unary or settle thread: what
    `max_concurrent_rpcs` must be above."""
    room = call_room(settings)
    return room.streams + room.probes + settings.grpc_workers + settings.settle_workers
