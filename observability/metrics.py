"""Prometheus instruments of the server: counters and histograms fed where work happens.

Off unless `serve --metrics-port` is given: until `enable()` is called, `recorder()` is
a `NullRecorder` whose methods do nothing, so a server without metrics pays one method
call per group commit, delivery batch or refused call, and nothing per message.

Hot paths report in bulk: the writer once per group commit (`committed`), the delivery
hub once per batch it hands out (`delivered`). Per-message histogram observations are
folded into bucket counts here (`_observe_many`: one bisect per message, one increment
per touched bucket) instead of one `Histogram.observe` (a lock and a scan of the bounds)
per message. Gauges that read the store are not here: they are computed at scrape time
(`timerwheel.observability.metrics_http`).

Processes (docs/metrics.md): in one process the instruments live in `REGISTRY` below.
Under `serve --workers N` every child calls `enable(multiprocess_dir)` first: the
instruments then write to prometheus_client's multiprocess files in that directory (one
per process), which the supervisor sums when scraped.
"""

from __future__ import annotations

import os
import threading
import time
from bisect import bisect_left
from collections.abc import Iterable
from typing import NamedTuple

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    values,
)

from timerwheel.store import records

# Seconds. Lateness: milliseconds matter, a minute is an incident.
LATENESS_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
)  # fmt: skip
COMMIT_SECONDS_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
COMMIT_SIZE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1_000, 2_000, 5_000, 10_000, 20_000)
# Seconds a call is handled for: a Send waits for its group commit (milliseconds), a
# Subscribe stream stays open for minutes or hours (its own method label keeps it apart).
RPC_SECONDS_BUCKETS = (
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 60.0,
)  # fmt: skip
RPC_LABELS = ("grpc_service", "grpc_method", "grpc_type")  # grpc-ecosystem's names


class CommitCounts(NamedTuple):
    """What one group commit's operations did, as its metrics count it."""

    sends: int  # messages newly stored
    acks: int  # messages acked
    cancels: int  # timers cancelled
    weight: int  # the commit's size, in the writer's units


class NullRecorder:
    """Metrics off: every report is dropped."""

    enabled = False

    def committed(
        self, counts: CommitCounts, fired_entries: dict[str, list], duration_s: float
    ) -> None:
        pass

    def wal_synced(self, duration_s: float) -> None:
        pass

    def cascade_chunk(self, wheel: str, duration_s: float) -> None:
        pass

    def delivered(self, batch, wall_now_ms: int) -> None:
        pass

    def refused(self, method: str, code: str) -> None:
        pass

    def admission_refused(self) -> None:
        pass


class RpcInstruments:
    """One gRPC method's pre-bound children: started, handling time, and handled by code
    (bound on a code's first use), so a call costs no label lookup."""

    __slots__ = (
        "_handled", "_labels", "_seconds_buckets", "_seconds_sum", "_started", "bounds", "codes",
    )  # fmt: skip

    def __init__(self, recorder: Recorder, labels: tuple[str, str, str]) -> None:
        self._labels = labels
        self._handled = recorder.rpc_handled
        self._started = recorder.rpc_started.labels(*labels)
        seconds = recorder.rpc_seconds.labels(*labels)
        self.bounds = seconds._upper_bounds
        self._seconds_buckets = seconds._buckets
        self._seconds_sum = seconds._sum
        self.codes: dict[str, Counter] = {}

    def started(self) -> None:
        self._started.inc()

    def handled(self, code: str, seconds: float) -> None:
        """A call ended with `code` (a grpc.StatusCode's name) after `seconds`."""
        child = self.codes.get(code)
        if child is None:
            child = self.codes[code] = self._handled.labels(*self._labels, code)
        child.inc()
        # Histogram.observe scans the bounds under a lock; one bisect and two increments
        # give the same buckets and sum.
        self._seconds_buckets[bisect_left(self.bounds, seconds)].inc(1)
        self._seconds_sum.inc(seconds)


class Recorder(NullRecorder):
    """The instruments, registered in `registry`."""

    enabled = True

    def __init__(self, registry: CollectorRegistry | None) -> None:
        def counter(name: str, text: str, labels: tuple[str, ...] = ()) -> Counter:
            return Counter(name, text, labels, registry=registry)

        def histogram(name: str, text: str, buckets, labels: tuple[str, ...] = ()) -> Histogram:
            return Histogram(name, text, labels, registry=registry, buckets=buckets)

        self.sends = counter("timerwheel_sends", "Timers stored by Send/SendBatch (new ids)")
        self.fires = counter("timerwheel_fires", "Timers fired (made visible to consumers)")
        self.deliveries = counter(
            "timerwheel_deliveries", "Messages handed to a subscriber (every attempt)"
        )
        self.redeliveries = counter(
            "timerwheel_redeliveries", "Deliveries that were a second or later attempt"
        )
        self.acks = counter("timerwheel_acks", "Fired messages acked (FIRED -> ACKED)")
        self.cancels = counter("timerwheel_cancels", "Cancel calls that left a timer CANCELLED")
        self.refusals = counter(
            "timerwheel_refusals", "Calls refused, by gRPC method and status code",
            ("method", "code"),
        )  # fmt: skip
        self.admission_refusals = counter(
            "timerwheel_admission_refusals",
            "Send and SendBatch calls refused before validation because the firing loop ran "
            "late (admit_fire_lag_ms)",
        )  # fmt: skip
        self.fire_lateness = histogram(
            "timerwheel_fire_lateness_seconds",
            "Fire time minus deliver time, per fired timer", LATENESS_BUCKETS,
        )  # fmt: skip
        self.delivery_lateness = histogram(
            "timerwheel_delivery_lateness_seconds",
            "First hand-out to a subscriber minus deliver time, per message", LATENESS_BUCKETS,
        )  # fmt: skip
        self.commit_size = histogram(
            "timerwheel_group_commit_ops",
            "Operations in one group commit (a SendBatch of n counts n)", COMMIT_SIZE_BUCKETS,
        )  # fmt: skip
        self.commit_seconds = histogram(
            "timerwheel_group_commit_duration_seconds",
            "RocksDB write of one group commit (to the WAL, without its fsync)",
            COMMIT_SECONDS_BUCKETS,
        )  # fmt: skip
        self.wal_syncs = counter(
            "timerwheel_wal_syncs",
            "fsyncs of the WAL: each makes every group commit written before it durable, "
            "and is made only when a caller waits on one (fires, cascades and sweeps alone "
            "wait for the next)",
        )  # fmt: skip
        self.wal_sync_seconds = histogram(
            "timerwheel_wal_sync_duration_seconds",
            "One fsync of the WAL (callers of the commits it covers wait for it; fires "
            "do not)", COMMIT_SECONDS_BUCKETS,
        )  # fmt: skip
        self.cascade_seconds = histogram(
            "timerwheel_cascade_chunk_duration_seconds",
            "Scanning and staging one cascade chunk, by the wheel it leaves",
            COMMIT_SECONDS_BUCKETS, ("wheel",),
        )  # fmt: skip
        # Every gRPC call, by method and status (grpc-ecosystem/go-grpc-prometheus names,
        # so existing dashboards and queries apply): timerwheel.server.rpc_metrics.
        self.rpc_started = counter(
            "grpc_server_started", "RPCs started on the server", RPC_LABELS
        )  # fmt: skip
        self.rpc_handled = counter(
            "grpc_server_handled",
            "RPCs completed on the server, whatever their status code",
            (*RPC_LABELS, "grpc_code"),
        )  # fmt: skip
        self.rpc_seconds = histogram(
            "grpc_server_handling_seconds",
            "Time from a call's start to its end (a stream's whole life), by method",
            RPC_SECONDS_BUCKETS, RPC_LABELS,
        )  # fmt: skip
        self._rpcs: dict[tuple[str, str, str], RpcInstruments] = {}
        self._refusals: dict[tuple[str, str], Counter] = {}
        self._cascades = {w: self.cascade_seconds.labels(w) for w in ("minute", "hour")}

    def committed(
        self, counts: CommitCounts, fired_entries: dict[str, list], duration_s: float
    ) -> None:
        """One group commit: what its operations did (counted by the writer, which knows
        the kinds of operation), what it fired ({topic: [(seq, id, record)]}: timers due,
        sent already due, series occurrences, and dead-letter moves), and its write's
        time."""
        sends, acks, cancels, weight = counts
        if sends:
            self.sends.inc(sends)
        if acks:
            self.acks.inc(acks)
        if cancels:
            self.cancels.inc(cancels)
        self.commit_size.observe(weight)
        self.commit_seconds.observe(duration_s)
        if fired_entries:
            raws = [record for rows in fired_entries.values() for _, _, record in rows]
            lateness = [ms / 1000 for ms in records.fire_lateness_ms(raws)]
            self.fires.inc(len(lateness))
            _observe_many(self.fire_lateness, lateness)

    def wal_synced(self, duration_s: float) -> None:
        """One fsync of the WAL (engine/wal_syncer.py, or the writer's own without a thread)."""
        self.wal_syncs.inc()
        self.wal_sync_seconds.observe(duration_s)

    def cascade_chunk(self, wheel: str, duration_s: float) -> None:
        self._cascades[wheel].observe(duration_s)

    def delivered(self, batch, wall_now_ms: int) -> None:
        """A batch of `timerwheel.delivery.hub.Delivered` handed to one subscriber."""
        deliver_at_ms = records.record_deliver_at_ms
        first = [wall_now_ms - deliver_at_ms(d.fired.record) for d in batch if d.attempt == 1]
        self.deliveries.inc(len(batch))
        if len(first) < len(batch):
            self.redeliveries.inc(len(batch) - len(first))
        if first:
            _observe_many(self.delivery_lateness, [ms / 1000 for ms in first])

    def rpc(self, service: str, method: str, kind: str) -> RpcInstruments:
        """The instruments of one gRPC method (`kind`: unary, client_stream, server_stream
        or bidi_stream); bound once per method, called when its handler is looked up."""
        labels = (service, method, kind)
        with _lock:
            found = self._rpcs.get(labels)
            if found is None:
                found = self._rpcs[labels] = RpcInstruments(self, labels)
            return found

    def refused(self, method: str, code: str) -> None:
        child = self._refusals.get((method, code))
        if child is None:
            child = self._refusals[(method, code)] = self.refusals.labels(method, code)
        child.inc()

    def admission_refused(self) -> None:
        self.admission_refusals.inc()


def _observe_many(histogram: Histogram, seconds: Iterable[float]) -> None:
    """`histogram.observe` for many values at once: the same buckets and sum, with one
    increment per bucket touched. Uses the histogram's bucket values directly
    (prometheus_client keeps one non-cumulative value per bound, cumulated on collect)."""
    bounds = histogram._upper_bounds
    counts: dict[int, int] = {}
    total = 0.0
    for value in seconds:
        index = bisect_left(bounds, value)
        counts[index] = counts.get(index, 0) + 1
        total += value
    histogram._sum.inc(total)
    for index, count in counts.items():
        histogram._buckets[index].inc(count)


REGISTRY = CollectorRegistry(auto_describe=True)
_recorder: NullRecorder = NullRecorder()
_lock = threading.Lock()


def recorder() -> NullRecorder:
    """What to report to: a `Recorder` once metrics are enabled in this process."""
    return _recorder


def enable(multiprocess_dir: str | None = None) -> Recorder:
    """Turn metrics on in this process (idempotent). With `multiprocess_dir`, the
    instruments write there (prometheus_client's multiprocess mode), for a scraper in
    another process; call it before anything else in the process reports."""
    global _recorder
    with _lock:
        if isinstance(_recorder, Recorder):
            return _recorder
        disable_created_metrics()  # no `_created` series: start times are noise here
        if multiprocess_dir is not None:
            os.environ["PROMETHEUS_MULTIPROC_DIR"] = multiprocess_dir
            values.ValueClass = values.MultiProcessValue()
        _recorder = Recorder(None if multiprocess_dir else REGISTRY)
        return _recorder


def wall_ms() -> int:
    """Wall-clock milliseconds, for delivery lateness (deliver times are wall-clock)."""
    return time.time_ns() // 1_000_000
