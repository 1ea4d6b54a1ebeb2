"""What a gRPC process holds of requests before it reads them, and freed memory given back.

Received, not yet read. grpcio's core receives a call's request into its own buffers as
far as HTTP/2 flow control lets the client send. By default it grows each stream's window
towards the connection's bandwidth-delay product (BDP probing): on loopback, 48 calls of
15 MiB waiting for a thread each had most of their request buffered, about 500 MiB before
any handler had seen a byte. So the server turns BDP probing off and announces a fixed
window of `STREAM_WINDOW_BYTES` a stream: a call not yet read holds at most that much, and
one being read pulls the rest as it is read (timerwheel.security.limits `ReceiveGate`
bounds how many are read at once). The cost is throughput of a single big request over a
long path: 256 KiB a round trip (25 MB/s at 10 ms).

Freed, not given back.
A request's bodies are a few large buffers (up to `max_request_bytes`, several copies on
their way in: docs/security.md, "Memory budget"). glibc's malloc serves large blocks with
mmap and gives them back on free, but only below a threshold that it raises to the size of
the last such block freed (up to 32 MiB): after the first big request, every later one
comes from the heaps of glibc's per-thread arenas (up to 8 per core), where freed blocks
stay resident unless they happen to lie at a heap's top. Under 48 concurrent SendBatch
calls of 15 MiB that kept over 400 MiB resident after every call had ended, on top of the
budget. Fixing the threshold (which turns its growth off) and trimming a heap's free top
early keep the resident set at what calls in progress hold.

Set once per server process, before its first request (`timerwheel.server.app`); a no-op
where the C library has no `mallopt` (not glibc).
"""

from __future__ import annotations

import ctypes
import ctypes.util

import structlog

from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.server")

M_TRIM_THRESHOLD = -1  # glibc <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD_BYTES = 64 * 1024  # blocks from here up: their own mmap, unmapped on free
TRIM_THRESHOLD_BYTES = 1024 * 1024  # a heap's free top beyond this goes back at once

STREAM_WINDOW_BYTES = 256 * 1024

_done = False


def receive_options(settings: Settings) -> list[tuple[str, int]]:
    """grpc.server options: the largest request (`max_request_bytes`, which Settings keeps
    within `max_inflight_request_bytes`) and the fixed stream window (above)."""
    return [
        ("grpc.max_receive_message_length", settings.max_request_bytes),
        ("grpc.http2.bdp_probe", 0),
        ("grpc.http2.lookahead_bytes", STREAM_WINDOW_BYTES),
    ]


def return_freed_memory() -> bool:
    """Set glibc's thresholds (above); True when they were set (now or before)."""
    global _done
    if _done:
        return True
    name = ctypes.util.find_library("c")
    try:
        mallopt = ctypes.CDLL(name).mallopt if name else None
    except (OSError, AttributeError):
        mallopt = None
    if mallopt is None:
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    done = bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES)) and done
    if not done:
        log.warning("mallopt_refused", mmap_threshold=MMAP_THRESHOLD_BYTES)
    _done = done
    return done
