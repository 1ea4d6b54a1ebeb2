"""Fair shares of what a gRPC process holds: request bytes in flight, streams per caller.

`ByteBudget` bounds the bytes that calls in progress hold at once (decoded requests, built
responses). A call that would go over is refused at once with RESOURCE_EXHAUSTED rather
than queued: waiting would hold its bytes anyway. A lone call always fits, because the
budget is at least `max_request_bytes` (checked by Settings).

`PerKeyLimit` counts what each caller holds (Subscribe streams) by an identity key, so one
caller's idle streams cannot lock every other consumer out (`caller_identity`).

`CallBudget` bounds calls anyone may make without a token (health Check and Watch,
reflection): so many at once in all, and so many per caller, refused at once beyond, so
such calls can hold no more than their own small pool (timerwheel.server.stream_pool).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import grpc

from timerwheel.wheels.domain import Overloaded


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

    @contextmanager
    def hold(self, size: int, what: str) -> Iterator[None]:
        """Hold `size` bytes for the block, or raise Overloaded naming `what`."""
        with self._lock:
            if self._held and self._held + size > self.limit_bytes:
                raise Overloaded(
                    f"{what} of {size} bytes: this server process already holds "
                    f"{self._held} bytes of calls in progress ({self._setting}="
                    f"{self.limit_bytes}); retry later"
                )
            self._held += size
        try:
            yield
        finally:
            with self._lock:
                self._held -= size


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


def caller_identity(context: grpc.ServicerContext) -> str:
    """Who a call counts against: its connection (`peer ipv4:127.0.0.1:51234`). Never
    something the client merely claims (metadata): an authenticated caller's token name is
    the key to use once the server authenticates callers."""
    return f"peer {context.peer()}"
