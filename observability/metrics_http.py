"""`/metrics` over HTTP (prometheus_client's server), and the gauges computed per scrape.

What a scrape returns: the counters and histograms of `timerwheel.observability.metrics` plus the
gauges
below, read when Prometheus asks and never kept up to date on the firing path:

    timerwheel_writer_up                     1 while the writer thread runs (0: stopped,
                                             or the engine process is unreachable)
    timerwheel_writer_queue_ops              operations waiting for the writer
    timerwheel_fire_lag_seconds              how late the writer's latest fires ran
    timerwheel_admission_refusing            1 while sends are refused (fire lag or due load)
    timerwheel_admission_due_load_percent    the projected CPU of the fires due ahead and
                                             the sends, in % of what the process gets
    timerwheel_pending_timers{wheel}         RocksDB's estimate of keys in each wheel
    timerwheel_fired_unacked{topic}          top `metrics_top_topics` topics + "other"
    timerwheel_timers_due{within}            due in the next 1m / 10m / 60m (whole minutes)
    timerwheel_subscribers                   open Subscribe streams
    timerwheel_rocksdb_live_data_bytes, timerwheel_rocksdb_pending_compaction_bytes,
    timerwheel_rocksdb_sst_files_bytes, timerwheel_data_dir_free_bytes
    timerwheel_thread_cpu_seconds_total{thread}   the engine process's CPU by kind of
                                             thread (timerwheel.observability.thread_cpu): its
                                             Python threads summed near 1, the GIL is full

Beside them, at every scrape: `timerwheel_build_info{version} 1` (the installed
version), and prometheus_client's standard `process_*` (CPU, memory, file descriptors,
start time; Linux /proc), `python_info` and `python_gc_*` families of the process that
serves /metrics. Those standard collectors read the process they run in and are not
multiprocess-aware, so under `--workers N` they describe the supervisor (docs/metrics.md):
the engine process's CPU is `timerwheel_thread_cpu_seconds_total`.

The engine's values come from `Engine.metrics_gauges` (one call; under `--workers N` an
IPC call from the supervisor to the engine process) and the subscriber count from the
delivery hub (or the delivery process).
"""

from __future__ import annotations

import errno
import importlib.metadata
from collections.abc import Callable

import structlog
from prometheus_client import (
    GC_COLLECTOR,
    PLATFORM_COLLECTOR,
    PROCESS_COLLECTOR,
    CollectorRegistry,
    start_http_server,
)
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.multiprocess import MultiProcessCollector

from timerwheel.observability import metrics

log = structlog.get_logger("timerwheel.metrics")


class ScrapeGauges:
    """A prometheus_client collector: the gauges, read at scrape time."""

    def __init__(
        self, engine_gauges: Callable[[], dict], subscribers: Callable[[], int],
        cluster: Callable[[], dict] | None = None,
    ) -> None:  # fmt: skip
        self._engine_gauges = engine_gauges
        self._subscribers = subscribers
        self._cluster = cluster  # a cluster node's map (timerwheel.cluster.node.cluster_map)

    def collect(self):
        try:
            values = self._engine_gauges()
        except Exception as exc:  # the engine process is restarting: the writer is not up
            log.warning("metrics_engine_unreachable", error=str(exc))
            values = None
        up = values is not None and values["writer_up"]
        yield _gauge("timerwheel_writer_up", "1 while the writer runs", up)
        if values is not None:
            yield from _engine_families(values)
        try:
            yield _gauge("timerwheel_subscribers", "Open Subscribe streams", self._subscribers())
        except Exception as exc:  # the delivery process is restarting
            log.warning("metrics_delivery_unreachable", error=str(exc))
        if self._cluster is not None:
            yield from cluster_families(self._cluster())


def cluster_families(cluster: dict):
    """Cluster mode (docs/cluster.md): this node's share, and every partition as it sees it."""
    yield _gauge(
        "timerwheel_cluster_partitions", "Partitions of the cluster", cluster["partitions"]
    )
    yield _gauge(
        "timerwheel_cluster_partitions_owned", "Partitions this node owns (verdict OWN)",
        len(cluster["owned"]),
    )  # fmt: skip
    yield _gauge(
        "timerwheel_cluster_live_nodes", "Nodes in the registry", len(cluster["live_nodes"])
    )
    yield _gauge(
        "timerwheel_cluster_delivering", "1 while this node may deliver (every lease OWN)",
        1 if cluster["delivering"] else 0,
    )  # fmt: skip
    yield _gauge(
        "timerwheel_cluster_takeovers", "Partitions this process took over since it started",
        cluster["takeovers"],
    )  # fmt: skip
    rows = cluster["map"]
    yield _labelled(
        "timerwheel_cluster_partition_epoch", "Each partition's lease epoch as this node read it",
        "partition", {str(r["partition"]): r["epoch"] for r in rows},
    )  # fmt: skip
    yield _labelled(
        "timerwheel_cluster_partition_owned", "1 for each partition this node owns",
        "partition", {str(r["partition"]): 1 if r["verdict"] == "own" else 0 for r in rows},
    )  # fmt: skip
    yield _labelled(
        "timerwheel_cluster_log_sequence",
        "The stream sequence of the last log record this node appended, per owned partition",
        "partition", {str(r["partition"]): r["last_sequence"] for r in rows if r["last_sequence"]},
    )  # fmt: skip
    read = [r for r in rows if r.get("stream_leader") or r.get("replicas_current")]
    yield _labelled(
        "timerwheel_cluster_replicas_current",
        "Replicas of an owned partition's stream that JetStream calls current, the leader "
        "included (the stream's replicas when healthy)",
        "partition", {str(r["partition"]): r["replicas_current"] for r in read},
    )  # fmt: skip
    yield _labelled(
        "timerwheel_cluster_replica_lag",
        "The largest lag of a follower of an owned partition's stream, in stream operations",
        "partition", {str(r["partition"]): r["replica_lag"] for r in read},
    )  # fmt: skip
    standing = [r for r in rows if r.get("standby_sequence") or r.get("standby_lag")]
    yield _labelled(
        "timerwheel_cluster_standby_sequence",
        "The stream sequence this node's warm standby of a partition has folded through",
        "partition", {str(r["partition"]): r["standby_sequence"] for r in standing},
    )  # fmt: skip
    yield _labelled(
        "timerwheel_cluster_standby_lag",
        "Stream sequences this node's warm standby of a partition has not folded yet",
        "partition", {str(r["partition"]): r["standby_lag"] for r in standing},
    )  # fmt: skip
    snapped = [r for r in rows if r.get("snapshot_sequence")]
    yield _labelled(
        "timerwheel_cluster_snapshot_sequence",
        "The stream sequence an owned partition's latest snapshot holds its log through",
        "partition", {str(r["partition"]): r["snapshot_sequence"] for r in snapped},
    )  # fmt: skip
    yield _labelled(
        "timerwheel_cluster_snapshot_age_seconds",
        "Age of an owned partition's latest snapshot (since JetStream stored its pointer)",
        "partition", {str(r["partition"]): r["snapshot_age_ms"] / 1000 for r in snapped},
    )  # fmt: skip
    leaders = GaugeMetricFamily(
        "timerwheel_cluster_stream_leader",
        "1 for the NATS server leading each owned partition's stream",
        labels=["partition", "server"],
    )
    for r in read:
        if r["stream_leader"]:
            leaders.add_metric([str(r["partition"]), r["stream_leader"]], 1)
    yield leaders


def _engine_families(values: dict):
    yield _gauge("timerwheel_writer_queue_ops", "Operations waiting for the writer",
                 values["writer_queue_ops"])  # fmt: skip
    yield _gauge(
        "timerwheel_fire_lag_seconds",
        "How late the writer's latest fires ran against their due time (0: none was due)",
        values["fire_lag_ms"] / 1000,
    )  # fmt: skip
    yield _gauge(
        "timerwheel_admission_refusing",
        "1 while sends are refused: the fires run late, or the due load ahead is over budget",
        int(values["admission_refusing"]),
    )  # fmt: skip
    yield _gauge(
        "timerwheel_admission_due_load_percent",
        "Projected CPU of the fires due ahead plus the sends, in % of the CPU the process "
        "gets (admit_due_load_pct refuses above it)",
        values["admission_due_load_pct"],
    )  # fmt: skip
    yield _labelled(
        "timerwheel_pending_timers", "Timers in each wheel (RocksDB's key estimate)", "wheel",
        values["pending_by_wheel"],
    )  # fmt: skip
    yield _labelled(
        "timerwheel_fired_unacked", "Fired, not yet acked messages, by topic (top N + other)",
        "topic", values["unacked_by_topic"],
    )  # fmt: skip
    due = {f"{ms // 60_000}m": count for ms, count in values["due_within_ms"].items()}
    yield _labelled(
        "timerwheel_timers_due", "Pending timers due within the next minutes (whole minutes)",
        "within", due,
    )  # fmt: skip
    for name, text in (
        ("rocksdb_live_data_bytes", "RocksDB estimate of live data, all column families"),
        ("rocksdb_pending_compaction_bytes", "RocksDB estimate of bytes compaction must rewrite"),
        ("rocksdb_sst_files_bytes", "Size of all SST files"),
        ("data_dir_free_bytes", "Free bytes on the data directory's filesystem"),
    ):  # fmt: skip
        key = name.removeprefix("rocksdb_")
        yield _gauge(f"timerwheel_{name}", text, values[key])
    threads = CounterMetricFamily(
        "timerwheel_thread_cpu_seconds",
        "CPU seconds of the engine process by kind of thread (writer, delivery, grpc_calls, ...)",
        labels=["thread"],
    )
    for kind, seconds in sorted(values["thread_cpu_s"].items()):
        threads.add_metric([kind], seconds)
    yield threads


def _gauge(name: str, text: str, value) -> GaugeMetricFamily:
    return GaugeMetricFamily(name, text, value=float(value or 0))


def _labelled(name: str, text: str, label: str, values: dict) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, text, labels=[label])
    for key, value in sorted(values.items()):
        family.add_metric([key], float(value))
    return family


def version() -> str:
    """The installed distribution's version; a checkout that was never installed has none."""
    try:
        return importlib.metadata.version("timerwheel")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


class BuildInfo:
    """`timerwheel_build_info{version} 1`: which release a scraped server runs."""

    def __init__(self) -> None:
        self._version = version()

    def collect(self):
        info = GaugeMetricFamily(
            "timerwheel_build_info", "The running timerwheel's version (always 1)",
            labels=["version"],
        )  # fmt: skip
        info.add_metric([self._version], 1.0)
        yield info


class _Instruments:
    """This process's counters and histograms (metrics off: none)."""

    def collect(self):
        return metrics.REGISTRY.collect()


class MetricsEndpoint:
    """The HTTP server of /metrics; `port` is the bound one (for a requested 0)."""

    def __init__(
        self, host: str, port: int, gauges: ScrapeGauges, multiprocess_dir: str | None = None
    ) -> None:
        registry = CollectorRegistry(auto_describe=False)
        if multiprocess_dir is None:
            registry.register(_Instruments())
        else:
            MultiProcessCollector(registry, path=multiprocess_dir)
        registry.register(gauges)
        registry.register(BuildInfo())
        # prometheus_client's default collectors (they live in its global registry, which
        # this endpoint does not serve): this process's process_*, python_info, python_gc_*.
        for standard in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
            registry.register(standard)
        try:
            self._httpd, self._thread = start_http_server(port, host, registry)
        except OSError as exc:
            reason = errno.errorcode.get(exc.errno or 0, "error")
            raise OSError(
                f"cannot serve metrics on {host}:{port} ({reason}); stop what listens there "
                "or give another --metrics-port (0 picks a free one)"
            ) from exc
        self.port = self._httpd.server_port
        log.info("metrics_serving", host=host, port=self.port, path="/metrics")

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)
