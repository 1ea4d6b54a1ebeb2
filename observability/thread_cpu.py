"""The CPU this process has used, by kind of thread: where a busy server's core goes.

The one number that says how close a server is to its ceiling is not the process's CPU
but its writer's: one thread does every group commit, cascade and fire, and it shares
the GIL with the gRPC and delivery threads. Near its ceiling the process uses more than
a core: by thread, the Python threads are at about one core (the GIL's one core plus
their calls into RocksDB and gRPC's C code), and RocksDB's compactions take up to half a
core beside them in some seconds (docs/lab-log.md has the runs). This module reads that
split.

How: Linux keeps each thread's user + system time in `/proc/self/task/TID/stat`. Python
threads are told apart by their `threading` names (`Thread.native_id` is the TID); the
threads Python does not know (RocksDB's, gRPC's C core) by their kernel name (`comm`).
Whatever no live thread accounts for (threads that have ended) is `other`, so the kinds
sum to the process's CPU. Elsewhere than Linux every kind but `other` reads 0.

It reads files, a few dozen small ones, when asked (Stats, a metrics scrape): nothing is
counted on the firing path.
"""

from __future__ import annotations

import os
import threading
import time

TASKS = "/proc/self/task"
_TICKS_PER_S = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100

# Python thread name prefix -> kind (first match wins; the names are set where the
# threads are made: engine/writer.py, engine/wal_syncer.py, delivery/hub.py,
# server/app.py, procs/ipc.py).
PYTHON_KINDS = (
    ("timerwheel-writer", "writer"),
    ("timerwheel-wal-sync", "wal_sync"),  # the WAL's fsyncs, behind the writer
    ("timerwheel-delivery", "delivery"),
    ("grpc-unary", "grpc_calls"),  # unary handlers: Send(Batch), Get, List, Stats...
    ("grpc-settle", "grpc_calls"),  # and Ack and Nack, on a pool of their own
    ("grpc-stream", "grpc_streams"),  # Subscribe streams
    ("engine-conn", "engine_calls"),  # `serve --workers`: the engine's calls from others
    ("MainThread", "main"),
)
# Kernel thread name (15 bytes at most) prefix -> kind, for threads Python does not know.
NATIVE_KINDS = (
    ("rocksdb:high", "rocksdb_flush"),
    ("rocksdb:low", "rocksdb_compaction"),
    ("event_engine", "grpc_native"),
    ("grpc_global", "grpc_native"),
)
KINDS = (
    *dict.fromkeys(kind for _, kind in PYTHON_KINDS + NATIVE_KINDS),
    "grpc_poller",  # grpcio's own Python thread that polls its completion queue
    "other",
)
# The kinds that run Python and so share the process's one GIL: together near one core,
# the process is at its ceiling (the writer alone is then at about half to two thirds of a
# core).
GIL_KINDS = (*dict.fromkeys(kind for _, kind in PYTHON_KINDS), "grpc_poller")
# RocksDB's own threads: its flushes and compactions, which run beside the GIL's threads.
ROCKSDB_KINDS = tuple(kind for prefix, kind in NATIVE_KINDS if prefix.startswith("rocksdb"))


def kind_of_python_thread(name: str) -> str:
    for prefix, kind in PYTHON_KINDS:
        if name.startswith(prefix):
            return kind
    # grpcio starts its poller as threading.Thread(target=_serve): named "Thread-N (_serve)"
    return "grpc_poller" if name.endswith("(_serve)") else "other"


def kind_of_native_thread(comm: str) -> str:
    for prefix, kind in NATIVE_KINDS:
        if comm.startswith(prefix):
            return kind
    return "other"


def _read(path: str) -> str | None:
    try:
        with open(path, "rb", buffering=0) as file:
            return file.read(512).decode()
    except OSError:  # the thread has ended
        return None


def _cpu_s(stat: str) -> float:
    """User + system seconds from a `stat` line (fields after the command name, which is
    in parentheses and may hold spaces)."""
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS_PER_S


def thread_cpu_seconds(tasks: str = TASKS) -> dict[str, float]:
    """CPU seconds of this process by kind of thread (every kind of `KINDS`, summing to
    the process's CPU), since the process started."""
    seconds = dict.fromkeys(KINDS, 0.0)
    if os.path.isdir(tasks):
        python = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
        for tid in os.listdir(tasks):
            stat = _read(f"{tasks}/{tid}/stat")
            if stat is None:
                continue
            name = python.get(int(tid))
            if name is not None:
                kind = kind_of_python_thread(name)
            else:
                kind = kind_of_native_thread((_read(f"{tasks}/{tid}/comm") or "").strip())
            seconds[kind] += _cpu_s(stat)
    seconds["other"] += max(0.0, time.process_time() - sum(seconds.values()))
    return {kind: round(value, 2) for kind, value in seconds.items()}
