"""Domain errors -> gRPC status codes, in one place.

Every servicer method runs inside `rpc_errors(context)`: a `TimerwheelError` raised by
the engine or by proto translation aborts the call with the matching status code and the
error's own message (which names the field and the value). Anything else is a bug: it is
logged once, with its traceback, and reported as INTERNAL without leaking internals.

One refusal says more than its code: a send refused at the door while the firing loop
runs late (`AdmissionRefused`) stored nothing, so its answer carries the trailing
metadata `timerwheel-retry-after-ms` (`RETRY_AFTER_KEY`), which the clients read as
"send it again after that long" (timerwheel/retries.py). No other RESOURCE_EXHAUSTED
carries it: a full disk, a full backlog or an overloaded writer give no such promise
(a cluster's split batch may fail after another part was stored).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import grpc
import structlog

from timerwheel.common import TimerwheelError
from timerwheel.observability import metrics
from timerwheel.retries import RETRY_AFTER_KEY
from timerwheel.wheels.domain import (
    AdmissionRefused,
    AlreadyExists,
    DiskFull,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    Overloaded,
    ShuttingDown,
    StoreUnavailable,
)

log = structlog.get_logger("timerwheel.rpc")

# Most specific first: subclasses (e.g. timerwheel.store.export.ExportError < FailedPrecondition)
# map through their base.
STATUS_OF: tuple[tuple[type[TimerwheelError], grpc.StatusCode], ...] = (
    (InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (NotFound, grpc.StatusCode.NOT_FOUND),
    (AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (DiskFull, grpc.StatusCode.RESOURCE_EXHAUSTED),  # the message says the disk is full
    (AdmissionRefused, grpc.StatusCode.RESOURCE_EXHAUSTED),  # + RETRY_AFTER_KEY: trailers_of
    (Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (StoreUnavailable, grpc.StatusCode.UNAVAILABLE),  # reopening after a write error
    (ShuttingDown, grpc.StatusCode.UNAVAILABLE),
)


class RefusalLog:
    """`rpc_refused` warnings, at most one per `interval_s` for each method and error kind.

    Backpressure is ours to see, but a full disk or an overloaded writer refuses every
    call, and a line per call would flood the log just when it is read. The refusals in
    between are counted and the next line says how many (`suppressed`); the metric
    `timerwheel_refusals_total` counts each one anyway.
    """

    def __init__(self, interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic):
        self._interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # -> (logged at, suppressed)

    def warn(self, method: str, code: grpc.StatusCode, error: Exception) -> None:
        key = (method, type(error).__name__)
        now = self._clock()
        with self._lock:
            logged_at, suppressed = self._last.get(key, (None, 0))
            if logged_at is not None and now - logged_at < self._interval_s:
                self._last[key] = (logged_at, suppressed + 1)
                return
            self._last[key] = (now, 0)
        log.warning(
            "rpc_refused", method=method, code=code.name, error=str(error), suppressed=suppressed
        )


REFUSALS = RefusalLog()


def status_code_of(error: TimerwheelError) -> grpc.StatusCode:
    for error_type, code in STATUS_OF:
        if isinstance(error, error_type):
            return code
    return grpc.StatusCode.UNKNOWN


def trailers_of(error: TimerwheelError) -> tuple[tuple[str, str], ...]:
    """The trailing metadata the answer to `error` carries besides its code and message:
    the retry-after of a refusal that stored nothing, else none."""
    if isinstance(error, AdmissionRefused):
        return ((RETRY_AFTER_KEY, str(error.retry_after_ms)),)
    return ()


@contextmanager
def rpc_errors(context: grpc.ServicerContext, method: str) -> Iterator[None]:
    """Turn what the body raises into a status on `context`.

    The body raises domain errors and never calls `context.abort` itself (abort raises a
    bare Exception, which this would misreport as INTERNAL).
    """
    try:
        yield
    except TimerwheelError as exc:
        code = status_code_of(exc)
        metrics.recorder().refused(method, code.name)
        # Client mistakes are the client's to log; backpressure is ours to see.
        if code is grpc.StatusCode.RESOURCE_EXHAUSTED:
            REFUSALS.warn(method, code, exc)
        if trailers := trailers_of(exc):
            context.set_trailing_metadata(trailers)
        context.abort(code, str(exc))
    except Exception as exc:
        log.exception("rpc_failed", method=method)
        context.abort(grpc.StatusCode.INTERNAL, f"{method} failed: {type(exc).__name__}")
