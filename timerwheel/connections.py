"""One client on several TCP connections, its calls taking turns on them.

A server started with `timerwheel serve --workers N` runs N gRPC processes on one port
(SO_REUSEPORT): the kernel gives each TCP *connection* to one worker, by a hash, and a
gRPC channel carries all of its calls on one connection. So a client with one channel
is served by one worker however many there are. `Client(target, connections=K)` opens
K channels, each on a connection of its own, and its calls take turns on them: K
connections spread over the workers as the kernel hashes them (a hash, not a balance:
with few connections two can land on one worker; docs/architecture.md).

Channels to one target in one process share one connection unless each keeps its own
subchannel pool (`grpc.use_local_subchannel_pool`): that is what makes them separate.
"""

from __future__ import annotations

from itertools import count as counter

import grpc

from timerwheel.credentials import Tls, open_aio_channel, open_channel

_OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)


def check_connections(count: object) -> int:
    """`count` if it is a whole number of at least 1; ValueError naming it otherwise."""
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ValueError(f"connections={count!r}: must be a whole number of at least 1")
    return count


def open_channels(
    target: str, tls: Tls | bool | None, token: str | None, options: list, count: int
) -> list[grpc.Channel]:
    """`count` channels to `target`, each on a TCP connection of its own."""
    options = _options_for(options, count)
    return [open_channel(target, tls, token, options) for _ in range(count)]


def open_aio_channels(
    target: str, tls: Tls | bool | None, token: str | None, options: list, count: int
) -> list[grpc.aio.Channel]:
    """`open_channels` for grpc.aio."""
    options = _options_for(options, count)
    return [open_aio_channel(target, tls, token, options) for _ in range(count)]


def _options_for(options: list, count: int) -> list:
    """The channel options for `count` connections (checked): each with its own pool."""
    return [*options, _OWN_CONNECTION] if check_connections(count) > 1 else options


class TakingTurns:
    """Stubs of one service, one per connection, used as one stub: each method looked up
    (`turns.Send`, `turns.SendBatch.future`) is the next connection's. Thread-safe:
    `next()` of an itertools counter is one step under the GIL."""

    def __init__(self, stubs: tuple) -> None:
        self.stubs = stubs
        self._turn = counter()

    def __getattr__(self, method: str):
        stubs = self.stubs
        return getattr(stubs[next(self._turn) % len(stubs)], method)


def one_stub(stubs: tuple):
    """The stub to call through: the only one, or all of them taking turns."""
    return stubs[0] if len(stubs) == 1 else TakingTurns(stubs)
