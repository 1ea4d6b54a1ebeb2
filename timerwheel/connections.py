"""One client on several TCP connections, its calls taking turns on them.

A server started with `timerwheel serve --workers N` runs N gRPC processes on one port
(SO_REUSEPORT): the kernel gives each TCP *connection* to one worker, by a hash, and a
gRPC channel carries all of its calls on one connection. So a client with one channel
is served by one worker however many there are. `Client(target, connections=K)` opens
K channels, each on a connection of its own, and its calls take turns on them.

The kernel hashes each connection to a worker: a hash, not a balance, so with few
connections two can land on one worker while another has none. A server's health answers
say which worker sent them (`timerwheel-worker: INDEX/COUNT` in the trailing metadata;
server/worker_health.py), and `Client.wait_ready()` uses that: while one worker has two
more of the client's connections than another, it dials one of the crowded worker's
connections again (a new connection is a new draw of the hash), up to
`REDIALS_PER_CONNECTION` times per connection (`redial_choice` decides which). A server
that does not say (an older one, a proxy in between) leaves the connections as they are.

Channels to one target in one process share one connection unless each keeps its own
subchannel pool (`grpc.use_local_subchannel_pool`): that is what makes them separate.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from itertools import count as counter

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from timerwheel.credentials import Tls, open_aio_channel, open_channel

_OWN_CONNECTION = ("grpc.use_local_subchannel_pool", 1)
WORKER_METADATA_KEY = "timerwheel-worker"
# Each redial is a fresh draw: with two workers, the chance that a connection needing a
# move lands on the crowded worker again every time is 2**-8 per connection.
REDIALS_PER_CONNECTION = 8

Place = tuple[int, int]  # (the worker's index, how many workers the server runs)


def worker_place(index: int, count: int) -> str:
    """The metadata value a worker answers with: "INDEX/COUNT"."""
    return f"{index}/{count}"


def place_in(metadata) -> Place | None:
    """The (index, count) a health answer's trailing metadata names, or None."""
    for key, value in metadata or ():
        if key == WORKER_METADATA_KEY:
            index, _, count = value.partition("/")
            if index.isdigit() and count.isdigit() and int(index) < int(count):
                return int(index), int(count)
    return None


def redial_choice(places: list[Place | None]) -> int | None:
    """Which connection to dial again so that the connections spread evenly over the
    server's workers: the last one on a worker that has at least two more of them than
    another worker has. None once they are even (no worker two ahead of another), or when
    not every connection's worker is known, or the answers disagree on how many workers
    there are (a restart in between)."""
    if not places or None in places or len({count for _, count in places}) != 1:
        return None
    count = places[0][1]
    on_worker = Counter(index for index, _ in places)
    crowded, most = on_worker.most_common(1)[0]
    if most - min(on_worker.get(index, 0) for index in range(count)) < 2:
        return None
    return max(i for i, (index, _) in enumerate(places) if index == crowded)


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


def redials(places: list[Place | None]) -> Iterator[int]:
    """The connections to dial again, one at a time, until the spread is even: the caller
    puts each new connection's place into `places` before asking for the next. At most
    `REDIALS_PER_CONNECTION` per connection: each redial is a draw, and draws can lose."""
    for _ in range(REDIALS_PER_CONNECTION * len(places)):
        index = redial_choice(places)
        if index is None:
            return
        yield index


def redial_channel(target: str, tls: Tls | bool | None, token: str | None, options: list):
    """One more channel to `target` on a connection of its own (a redial)."""
    return open_channel(target, tls, token, [*options, _OWN_CONNECTION])


def redial_aio_channel(target: str, tls: Tls | bool | None, token: str | None, options: list):
    """`redial_channel` for grpc.aio."""
    return open_aio_channel(target, tls, token, [*options, _OWN_CONNECTION])


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


def channel_ready(channel: grpc.Channel, deadline: float) -> None:
    """Block until `channel` is connected (grpc.FutureTimeoutError at `deadline`)."""
    grpc.channel_ready_future(channel).result(timeout=max(0.0, deadline - time.monotonic()))


def spread(
    channels: list[grpc.Channel], redial: Callable[[], grpc.Channel], deadline: float
) -> tuple[list[grpc.Channel], list[Place | None]]:
    """The connections spread evenly over the server's workers (see the module's
    docstring): the channels, some dialled again (the old ones closed), and where each
    went."""
    channels = list(channels)
    places = [place_of(channel, deadline) for channel in channels]
    for index in redials(places):
        channel = redial()
        try:
            channel_ready(channel, deadline)
        except BaseException:
            channel.close()
            raise
        channels[index].close()
        channels[index], places[index] = channel, place_of(channel, deadline)
    return channels, places


def place_of(channel: grpc.Channel, deadline: float) -> Place | None:
    """The worker that answers on `channel`'s connection, as its health answer says."""
    check = health_pb2_grpc.HealthStub(channel).Check
    try:
        _, call = check.with_call(
            health_pb2.HealthCheckRequest(), timeout=max(0.001, deadline - time.monotonic())
        )
    except grpc.RpcError:
        return None  # no answer in time, or no health service: leave the spread as it is
    return place_in(call.trailing_metadata())
