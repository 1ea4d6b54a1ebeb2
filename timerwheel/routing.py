"""Client-side routing by partition (docs/cluster.md, "ClusterMap and routing").

A cluster node answers a call on any id, forwarding it to the owner of the id's
partition: one more hop. `timerwheel.Client` and `timerwheel.AsyncClient` save it: each
reads the cluster's map (`ClusterMap`: the partition count and each partition's owner and
address) and sends each id-keyed call (Send and SendBatch with client-chosen ids, Get,
Cancel, Reschedule, PauseSeries, ResumeSeries) to the owner itself, marked
`timerwheel-direct` so that a node that no longer owns the partition answers
FAILED_PRECONDITION "not owner of partition N: owner is <name> at <address>, epoch E"
instead of forwarding it. On that answer, or UNAVAILABLE (the owner went away),
the client reads the map again and retries once, at the new owner.

The map is read when the first id-keyed call is made, not when the client is built. A
single node (not in cluster mode) answers `cluster` false, and an older server
UNIMPLEMENTED: from then on nothing is routed and every call goes to the target as
before, so the single-node path costs one ClusterMap call in the client's life. A map
that cannot be read (the target is down) is tried again at most every `RETRY_MAP_S`;
meanwhile calls go to the target, which forwards them.

One implementation of the decisions serves both clients: `RouteTable` (the map, each
id's owner, when and from where to read the map, a channel per owner), under `Router`
here (blocking calls) and `timerwheel.aio_routing.AsyncRouter` (grpc.aio, awaited).

Not routed: sends without an id (any node makes one for a partition it owns), List,
Count and Topics (the node asked gathers them from every node), Subscribe (fanned in by
the node asked), and Ack and Nack: they must reach the node whose stream delivered the
message, which is the node the Subscribe went to (server/fan_in.py).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Iterator
from itertools import chain
from typing import Any

import grpc

from timerwheel.partitioning import partition_of
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc

DIRECT = "timerwheel-direct"  # as server/forwarding.py reads it
DIRECT_METADATA = ((DIRECT, "1"),)
NOT_OWNER = "not owner of partition "
RETRY_MAP_S = 5.0  # a map that could not be read is asked for again after this
MAP_TIMEOUT_S = 5.0  # one ClusterMap call at most


UNSPECIFIED_HOSTS = frozenset({"0.0.0.0", "::", "[::]", ""})


def reachable(address: str) -> bool:
    """Whether a client can dial the address a node advertises: not a wildcard bind
    (`serve --host 0.0.0.0` advertises 0.0.0.0, which would reach this machine, not the
    node). Such a partition is treated as one whose owner is unknown: calls on it go to
    the target."""
    host = address.rpartition(":")[0]
    return bool(address) and host not in UNSPECIFIED_HOSTS


def reroutable(error: grpc.RpcError) -> bool:
    """An answer after which the map is read again and the call retried once: the node no
    longer owns the partition, or it (or the partition's owner) is away."""
    code = error.code()
    if code == grpc.StatusCode.UNAVAILABLE:
        return True
    return code == grpc.StatusCode.FAILED_PRECONDITION and (error.details() or "").startswith(
        NOT_OWNER
    )


class RouteTable:
    """What a routing client decides, whatever its kind of channel (thread-safe): the map
    (read from ClusterMap answers), each id's owner address, whether to read the map now
    and from where, and a stub per owner opened once. `Router` (here) and
    `timerwheel.aio_routing.AsyncRouter` add the calls, blocking or awaited.

    `primary()`: the stub of the client's target; `open_channel(address)` opens a
    channel to a node with the client's credentials (a grpc or a grpc.aio one)."""

    def __init__(
        self, primary: Callable[[], Any], open_channel: Callable[[str], Any],
        timeout_s: float | None,
    ) -> None:  # fmt: skip
        self._primary = primary
        self._open_channel = open_channel
        self.map_timeout_s = MAP_TIMEOUT_S if timeout_s is None else min(timeout_s, MAP_TIMEOUT_S)
        self._lock = threading.Lock()
        self._single = False  # decided: a single node (or an older server): route nothing
        self._partitions = 0  # 0: no map yet
        self._addresses: list[str] = []  # partition -> owner address ("" unknown)
        self._next_fetch = 0.0
        self._channels: dict[str, Any] = {}
        self._stubs: dict[str, pb_grpc.TimerServiceStub] = {}
        self.fetches = 0  # maps read (for tests and curiosity)

    @property
    def single(self) -> bool:
        return self._single

    def wants_map(self, message_id: str) -> bool:
        """Whether a call on `message_id` should read the map first (none read yet)."""
        return not self._single and bool(message_id) and not self._partitions

    def routes(self, message_id: str) -> bool:
        """Whether a call on `message_id` goes by the map (one is read, a cluster's)."""
        return not self._single and bool(message_id) and bool(self._partitions)

    def address_of(self, message_id: str) -> str:
        """The owner's address as the map has it; "" when unknown or not routed."""
        if not self.routes(message_id):
            return ""
        with self._lock:
            partitions, addresses = self._partitions, self._addresses
        return addresses[partition_of(message_id, partitions)] if partitions else ""

    def stub_at(self, address: str) -> pb_grpc.TimerServiceStub | None:
        """The stub of the node at `address` (a channel opened once); None for ""."""
        if not address:
            return None
        with self._lock:
            stub = self._stubs.get(address)
            if stub is None:
                channel = self._channels[address] = self._open_channel(address)
                stub = self._stubs[address] = pb_grpc.TimerServiceStub(channel)
            return stub

    def map_sources(self, force: bool) -> Iterator | None:
        """The stubs to ask for the map, in turn (the target, then every node the last
        map named, its channel opened only when asked); None: do not ask now (a single
        node, or `force` False within `RETRY_MAP_S` of a failed read)."""
        if self._single or (not force and time.monotonic() < self._next_fetch):
            return None
        with self._lock:
            known = [address for address in dict.fromkeys(self._addresses) if address]
        return chain([self._primary()], filter(None, map(self.stub_at, known)))

    def refused(self, error: grpc.RpcError) -> bool:
        """A node's error to ClusterMap: True when it settles the question (an older
        server, UNIMPLEMENTED: route nothing), False to ask the next node."""
        if error.code() == grpc.StatusCode.UNIMPLEMENTED:
            self._single = True
            return True
        return False

    def answered(self, answer: pb.ClusterMapResponse) -> bool:
        """Take a map; True when it is a cluster's (calls are routed by it)."""
        self.fetches += 1
        self._use(answer)
        return not self._single

    def unanswered(self) -> bool:
        """No node answered: ask again no sooner than `RETRY_MAP_S` from now."""
        self._next_fetch = time.monotonic() + RETRY_MAP_S
        return False

    def _use(self, answer: pb.ClusterMapResponse) -> None:
        if not answer.cluster or answer.partitions < 1:
            self._single = True
            return
        addresses = [""] * answer.partitions
        for owner in answer.owners:
            if 0 <= owner.partition < answer.partitions and reachable(owner.address):
                addresses[owner.partition] = owner.address
        with self._lock:
            self._partitions, self._addresses = answer.partitions, addresses

    def _take_channels(self) -> list:
        with self._lock:
            channels = list(self._channels.values())
            self._channels.clear()
            self._stubs.clear()
        return channels


class Router(RouteTable):
    """The routing of `timerwheel.Client`: `RouteTable` with blocking calls."""

    def owner_stub(self, message_id: str) -> pb_grpc.TimerServiceStub | None:
        """The stub of the node that owns `message_id`'s partition; None: call the
        target as a plain client would (single node, no map, no owner known)."""
        if self.wants_map(message_id) and not self.refresh(force=False):
            return None
        return self.stub_at(self.address_of(message_id))

    def refresh(self, force: bool = True) -> bool:
        """Read the map again (from the target, else from a node the last map named).
        False when no node answered; `force` False: not before `RETRY_MAP_S` after a
        failed read."""
        sources = self.map_sources(force)
        if sources is None:
            return False
        for stub in sources:
            try:
                answer = stub.ClusterMap(pb.ClusterMapRequest(), timeout=self.map_timeout_s)
            except grpc.RpcError as error:
                if self.refused(error):
                    return False
                continue
            return self.answered(answer)
        return self.unanswered()

    def close(self) -> None:
        for channel in self._take_channels():
            channel.close()


def spans(indices: list[int]) -> str:
    """[0, 1, 2, 5] -> "[0-2, 5]": the messages of a batch, as an error names them."""
    runs: list[list[int]] = []
    for index in indices:
        if runs and runs[-1][1] == index - 1:
            runs[-1][1] = index
        else:
            runs.append([index, index])
    return "[" + ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in runs) + "]"


def split_summary(unacked: list[int], acked: list[int]) -> str:
    """What a failed SendBatch split by owner says of its messages (the server's split
    and the client's say it alike)."""
    if not acked:
        return "no message of the batch was acknowledged"
    return (
        f"messages {spans(unacked)} not acknowledged, {spans(acked)} acknowledged; a "
        "retry of the whole batch with the same ids is idempotent"
    )


FIELD_CODES = (grpc.StatusCode.INVALID_ARGUMENT, grpc.StatusCode.ALREADY_EXISTS)
_INDEX = re.compile(r"messages\[(\d+)\]")


def in_batch(code: grpc.StatusCode, details: str, indices: list[int], ids: list[str]) -> str:
    """A part's error message naming the message by its index in the whole batch
    (`indices`: the part's messages' places in the batch; `ids`: the batch's message
    ids), for the codes whose message names a field."""
    if code not in FIELD_CODES:
        return details
    if len(indices) > 1 and _INDEX.search(details):
        return _INDEX.sub(lambda m: f"messages[{indices[int(m.group(1))]}]", details)
    if len(ids) < 2:
        return details
    if len(indices) == 1:
        return f"messages[{indices[0]}].{details}"
    named = next((i for i in indices if details.startswith(f"message_id={ids[i]!r}")), None)
    return details if named is None else f"messages[{named}].{details}"
