"""A bound on reading a request: a call whose request has not arrived within
`request_read_timeout_ms` of the server starting to read it is cancelled.

The synchronous gRPC server reads a request on a thread of its pool, within a place of a
receive gate (timerwheel.security.limits.ReceiveGate), and waits for it as long as the
call lasts: a call whose client sent its headers and never its request (or sends it a
byte at a time) held its thread and its place until its deadline, and a call sent without
a deadline until its connection closed. Two tenants doing so held every unary thread
(at most a share each) and every place of the gate, and every other tenant's call waited
for as long as they liked. Now each read has a deadline of its own, and a call whose
request has not come by then is cancelled: its thread and its place come free, and the
stalled calls of a flood are taken out one place at a time, every timeout, while the
gate gives each freed place in turn (another caller's call gets one of the next freed).

The clock starts when the call has its place and starts reading, not when it arrives: a
call waiting for a thread or a place waits for the server, not for its client, and a big
request queued behind others is not late. A request must then arrive within the bound:
at `max_request_bytes` (16 MiB) and 10 s, at 1.6 MiB/s at least.

What it relies on, all of it grpcio's public API: the request guard and the probes hand
grpcio request-streaming handlers, so a call's behaviour runs before its request is read
and reads it itself from the request iterator (timerwheel.security.guard `_admitted`,
timerwheel.server.stream_pool `admitted`); and `ServicerContext.cancel()`, called from
this module's one timer thread, ends the call: its client gets CANCELLED, and the
reader's `next()` returns or raises grpc.RpcError. The public API has no way to send a
status from a thread other than the call's (grpcio's private call object has: left
alone), so the client is not told why; the server logs `request_read_timeout`, naming
the setting. Not relied on: how grpcio waits for a unary request (`_unary_request`), nor
the shape of what it submits to a pool.

One thread times every read of a server's gate (a thread a read would cost more than the
read). Every read has the same timeout, so reads expire in the order they started: a
FIFO, at most as many as the gate's places. The thread sleeps until the oldest read's
deadline and is woken only when it has none to wait for, not for every read: a read
costs a lock and a dict entry. It ends once no read has been timed for a while, and the
next read starts another.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator

import grpc
import structlog

from timerwheel.observability import metrics

log = structlog.get_logger("timerwheel.guard")

SETTING = "request_read_timeout_ms"
IDLE_S = 5.0  # the timer thread ends after this long without a read to time


class Read:
    """One read being timed: `expired` once its call has been (or is being) cancelled."""

    __slots__ = ("cancel", "deadline", "expired")

    def __init__(self, deadline: float, cancel: Callable[[], object]) -> None:
        self.deadline = deadline
        self.cancel = cancel
        self.expired = False


class ReadTimer:
    """Calls `cancel` of a read not ended (`end`) within `timeout_ms` of its `start`."""

    def __init__(self, timeout_ms: int, setting: str = SETTING) -> None:
        if not isinstance(timeout_ms, int) or timeout_ms <= 0:
            raise ValueError(f"{setting}={timeout_ms!r}: must be a positive integer")
        self.timeout_ms = timeout_ms
        self.setting = setting
        self._reads: OrderedDict[Read, None] = OrderedDict()  # oldest, so soonest, first
        self._cond = threading.Condition()
        self._thread: threading.Thread | None = None
        self._idle = False  # the thread waits for a read to time (else for a deadline)

    @property
    def timing(self) -> int:
        """Reads being timed now."""
        with self._cond:
            return len(self._reads)

    def start(self, cancel: Callable[[], object]) -> Read:
        read = Read(time.monotonic() + self.timeout_ms / 1000, cancel)
        with self._cond:
            self._reads[read] = None
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, name="request-read-timer", daemon=True
                )
                self._thread.start()
            elif self._idle:  # else it wakes at an earlier read's deadline, and sees this
                self._cond.notify()
        return read

    def end(self, read: Read) -> bool:
        """Stop timing `read`: True when it expired (its call is cancelled)."""
        with self._cond:
            self._reads.pop(read, None)
            return read.expired

    def _run(self) -> None:
        while (read := self._next_expired()) is not None:
            try:
                read.cancel()  # outside the lock: grpcio takes its own
            except Exception:  # a call already gone: nothing left to free
                log.exception("request_read_cancel_failed")

    def _next_expired(self) -> Read | None:
        """The next read past its deadline, marked expired and no longer timed; None (the
        thread then ends) once none has been timed for IDLE_S."""
        with self._cond:
            while True:
                if not self._reads:
                    self._idle = True
                    woken = self._cond.wait(IDLE_S)
                    self._idle = False
                    if not woken and not self._reads:
                        self._thread = None
                        return None
                    continue
                read = next(iter(self._reads))
                left = read.deadline - time.monotonic()
                if left <= 0:
                    del self._reads[read]
                    read.expired = True
                    return read
                self._cond.wait(left)


def next_request(
    requests: Iterator[object], context: grpc.ServicerContext, timer: ReadTimer | None,
    what: str, rpc: str | None = None,
) -> object | None:  # fmt: skip
    """The call's next request, or None when its client sent none, read within `timer`'s
    bound (None: unbounded). A read that expired ends the call's behaviour here
    (CANCELLED naming the setting; the call itself is cancelled already), counted in
    `timerwheel_refusals_total` under `rpc` when given. A request that came as its read
    expired is returned: its call is cancelled, and ends as one its client cancelled."""
    if timer is None:
        return next(requests, None)
    read = timer.start(context.cancel)
    try:
        got = next(requests, None)
    except grpc.RpcError:  # the request iterator of a cancelled call
        if not timer.end(read):
            raise  # cancelled otherwise: by its client, or its deadline
    else:
        if not timer.end(read) or got is not None:
            return got
    log.warning("request_read_timeout", call=what, **{timer.setting: timer.timeout_ms})
    if rpc is not None:
        metrics.recorder().refused(rpc, "CANCELLED")
    context.abort(
        grpc.StatusCode.CANCELLED,
        f"{what}: the request did not arrive within {timer.setting}={timer.timeout_ms}",
    )
    return None  # pragma: no cover (abort raises)
