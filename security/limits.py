"""Fair shares of what a gRPC process holds: request bytes in flight, streams per caller.

`ByteBudget` bounds the bytes that calls in progress hold at once (decoded requests, built
responses). A call that would go over is refused at once with RESOURCE_EXHAUSTED rather
than queued: waiting would hold its bytes anyway. A lone call always fits, because the
budget is at least `max_request_bytes` (checked by Settings).

`PerKeyLimit` counts what each caller holds (Subscribe streams) by an identity key, so one
caller's idle streams cannot lock every other consumer out (`caller_identity`: the token's
name when the server has tokens, else the peer's address without its port, so opening
more connections gains a caller nothing).

`ReceiveGate` bounds how many requests are being read at once (in all and per caller), so
the bytes grpcio buffers before the byte budget can see them are bounded too.

`CallBudget` bounds calls anyone may make without a token (health Check and Watch,
reflection): so many at once in all, and so many per caller, refused at once beyond, so
such calls can hold no more than their own small pool (timerwheel.server.stream_pool).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import grpc

from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.settings import Settings


class ByteBudget:
    def __init__(self, limit_bytes: int, setting: str) -> None:
        self.limit_bytes = limit_bytes
        self._setting = setting
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    def take(self, size: int, what: str) -> None:
        """Hold `size` bytes until `give_back`, or raise Overloaded naming `what`."""
        with self._lock:
            if self._held and self._held + size > self.limit_bytes:
                raise Overloaded(
                    f"{what} of {size} bytes: this server process already holds "
                    f"{self._held} bytes of calls in progress ({self._setting}="
                    f"{self.limit_bytes}); retry later"
                )
            self._held += size

    def give_back(self, size: int) -> None:
        with self._lock:
            self._held -= size

    @contextmanager
    def hold(self, size: int, what: str) -> Iterator[None]:
        """Hold `size` bytes for the block, or raise Overloaded naming `what`."""
        self.take(size, what)
        try:
            yield
        finally:
            self.give_back(size)


class ReceiveGate:
    """At most `places` requests being received at once, and `per_key` of them per caller,
    given out in turn.

    grpcio reads a request whole (up to `grpc.max_receive_message_length`) before anyone
    can look at its size, so what calls can hold before the byte budget sees them is
    bounded by how many are read at once. A call waits for a place rather than being
    refused: it holds no bytes while it waits, and a small request's read takes
    microseconds. The per-caller share leaves a place for others when one caller stalls
    in the middle of its requests.

    Fair, so that a caller's small request is read next to others' big ones: a freed
    place goes to the callers waiting in turn (round robin; each caller's calls first come,
    first served), and the last free place only to a caller that holds none, so a caller
    with nothing being read gets the next place freed, however many big requests other
    callers (two tenants at once, say) keep waiting. Waiters used to race for each freed
    place: a token's 30-byte Send lost to dozens of 15 MiB SendBatch and Nack calls for
    seconds."""

    def __init__(self, places: int, per_key: int) -> None:
        self.places = places
        self.per_key = per_key
        self._held = 0
        self._counts: dict[str, int] = {}
        self._waiting: dict[str, deque[object]] = {}  # each caller's waiting calls, in order
        self._turns: deque[str] = deque()  # callers with waiting calls, next turn first
        self._granted: set[object] = set()
        self._cond = threading.Condition()

    @property
    def held(self) -> int:
        with self._cond:
            return self._held

    @property
    def waiting(self) -> int:
        """Calls waiting for a place."""
        with self._cond:
            return sum(len(waiting) for waiting in self._waiting.values())

    def acquire(self, key: str, still_wanted: Callable[[], bool], check_s: float = 1.0) -> bool:
        """A place for `key`; False (no place taken) once `still_wanted()` is false while
        waiting (the call was cancelled or its deadline passed)."""
        ticket = object()
        with self._cond:
            waiting = self._waiting.get(key)
            if waiting is None:
                waiting = self._waiting[key] = deque()
                self._turns.append(key)
            waiting.append(ticket)
            self._grant()
            while ticket not in self._granted:
                if not still_wanted():
                    waiting.remove(ticket)
                    if not waiting:
                        del self._waiting[key]
                        self._turns.remove(key)
                    self._grant()  # it may have been what held another caller back
                    return False
                self._cond.wait(check_s)  # woken by a grant; the timeout re-checks the call
            self._granted.discard(ticket)
            return True

    def release(self, key: str) -> None:
        with self._cond:
            self._held -= 1
            count = self._counts.pop(key, 0) - 1
            if count > 0:
                self._counts[key] = count
            self._grant()

    def _grant(self) -> None:
        """Free places to waiting callers in turn (the lock held); wakes them if any."""
        granted = False
        while self._held < self.places:
            last = self._held == self.places - 1
            for _ in range(len(self._turns)):
                key = self._turns[0]
                count = self._counts.get(key, 0)
                if count < self.per_key and not (last and count):
                    break
                self._turns.rotate(-1)
            else:
                break  # no waiting caller may take a place now
            self._turns.popleft()
            waiting = self._waiting[key]
            self._granted.add(waiting.popleft())
            if waiting:
                self._turns.append(key)  # its next call waits for its next turn
            else:
                del self._waiting[key]
            self._held += 1
            self._counts[key] = self._counts.get(key, 0) + 1
            granted = True
        if granted:
            self._cond.notify_all()  # waiters differ by ticket: each checks its own


def receive_gate(settings: Settings) -> ReceiveGate:
    """The gate of a gRPC process: twice as many places as the byte budget holds requests
    of the largest size (4 by default), and one place fewer per caller, so that one caller
    stalled in the middle of its requests never holds them all. What the places hold is
    at most places x max_request_bytes of received requests not yet charged (about twice
    that while grpcio hands them over), whatever the number of calls. (The last place
    goes only to a caller reading nothing, which implies that share; it is kept explicit.)"""
    places = max(2, 2 * settings.max_inflight_request_bytes // settings.max_request_bytes)
    return ReceiveGate(places, places - 1)


class PerKeyLimit:
    """At most `limit` at once per key; counts vanish when they reach zero."""

    def __init__(self, limit: int, setting: str) -> None:
        self.limit = limit
        self._setting = setting
        self._counts: dict[str, int] = {}
        self._lock = threading.Lock()

    def acquire(self, key: str, what: str) -> None:
        with self._lock:
            count = self._counts.get(key, 0)
            if count >= self.limit:
                raise Overloaded(
                    f"{what}: {key} already holds {count} ({self._setting}={self.limit}); "
                    "close some or retry later"
                )
            self._counts[key] = count + 1

    def release(self, key: str) -> None:
        with self._lock:
            count = self._counts.pop(key, 0) - 1
            if count > 0:
                self._counts[key] = count

    def count(self, key: str) -> int:
        with self._lock:
            return self._counts.get(key, 0)


class CallBudget:
    """At most `limit` calls at once in all, and `per_key` of them per key."""

    def __init__(self, limit: int, setting: str, per_key: int, per_key_setting: str) -> None:
        self.limit = limit
        self._setting = setting
        self._per_key = PerKeyLimit(per_key, per_key_setting)
        self._held = 0
        self._lock = threading.Lock()

    @property
    def held(self) -> int:
        with self._lock:
            return self._held

    def acquire(self, key: str, what: str) -> None:
        """One place for `key`, or Overloaded naming the limit it would go over."""
        with self._lock:
            if self._held >= self.limit:
                raise Overloaded(
                    f"{what}: this server process already has {self._held} open "
                    f"({self._setting}={self.limit}); retry later"
                )
            self._per_key.acquire(key, what)
            self._held += 1

    def release(self, key: str) -> None:
        with self._lock:
            self._per_key.release(key)
            self._held -= 1


# The authenticated caller of the call running on this thread, set by the request guard
# (timerwheel.security.guard). grpcio runs each call in a contextvars.Context of its own,
# so it never leaks from one call to the next.
_CALLER: ContextVar[str | None] = ContextVar("timerwheel_caller", default=None)


def set_caller(token_name: str) -> None:
    """The call running on this thread was made with the token named `token_name`."""
    _CALLER.set(f"token {token_name!r}")


def caller_identity(context: grpc.ServicerContext) -> str:
    """Who a call counts against: its token (`token 'orders-consumer'`) when the server
    authenticated it, else its peer's address without the port (`peer 127.0.0.1`): a
    caller with many connections, or many tokens' worth of connections under one token,
    is still one caller. Never something the client merely claims (metadata)."""
    caller = _CALLER.get()
    if caller is not None:
        return caller
    return f"peer {peer_host(context.peer())}"


def share_identity(context: grpc.ServicerContext) -> str:
    """Whose share of the unary threads and of the receive gate a call takes: its token,
    else its connection (`connection_identity`). Without a token file there are no tenants
    (any caller may do anything), so these shares keep one stalled or busy connection from
    holding up the others; an address would make every local process one caller on a
    loopback server (timerwheel.security.fair_pool says more)."""
    caller = _CALLER.get()
    return caller if caller is not None else connection_identity(context)


def connection_identity(context: grpc.ServicerContext) -> str:
    """One connection (`peer ipv4:127.0.0.1:51234`): what health's per-connection budgets
    count against (a load balancer's probes come from few addresses, on a connection each)."""
    return f"peer {context.peer()}"


def peer_host(peer: str) -> str:
    """grpcio's peer string without its port: `ipv4:10.0.0.7:51234` -> `10.0.0.7`,
    `ipv6:[::1]:51234` -> `[::1]`; anything else (`unix:/run/tw.sock`) whole."""
    kind, _, address = peer.partition(":")
    if kind == "ipv4":
        return address.rpartition(":")[0] or address
    if kind == "ipv6":
        return address.rpartition("]")[0] + "]" if address.startswith("[") else address
    return peer


def caller_of_context(context) -> str | None:
    """The authenticated caller set in a call's `contextvars.Context` (`set_caller`), read
    from outside it: the fair pool (timerwheel.security.fair_pool) before the call runs."""
    return context.get(_CALLER)
