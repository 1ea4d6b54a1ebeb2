"""What the engine reports at scrape time: cheap reads, never on the firing path.

`Engine.metrics_gauges` answers with a plain dict (it crosses to the supervisor under
`serve --workers N`); `timerwheel.observability.metrics_http` turns it into Prometheus gauges. Every
value here is in memory or a RocksDB property: no scan of timers, whatever the backlog.

`UnackedByTopic` keeps the fired, un-acked count of each topic: counted from the `ready`
column family once at open, then +n per topic for each commit that fired, -n per ack.
"""

from __future__ import annotations

import shutil
import threading

from timerwheel.observability.thread_cpu import thread_cpu_seconds
from timerwheel.store import keys

DUE_HORIZONS_MS = (60_000, 600_000, 3_600_000)  # timers due in the next 1 / 10 / 60 minutes
WHEELS = ("second", "minute", "hour")
ROCKS_PROPERTIES = {
    "live_data_bytes": "rocksdb.estimate-live-data-size",
    "pending_compaction_bytes": "rocksdb.estimate-pending-compaction-bytes",
    "sst_files_bytes": "rocksdb.total-sst-files-size",
}


class UnackedByTopic:
    def __init__(self, counts: dict[str, int]) -> None:
        self._lock = threading.Lock()
        self._counts = {topic: n for topic, n in counts.items() if n > 0}

    def fired(self, entries: dict[str, list]) -> None:
        """A commit fired `entries` (fired rows per topic)."""
        with self._lock:
            for topic, rows in entries.items():
                self._counts[topic] = self._counts.get(topic, 0) + len(rows)

    def acked(self, topic: str, count: int) -> None:
        with self._lock:
            left = self._counts.get(topic, 0) - count
            if left > 0:
                self._counts[topic] = left
            else:
                self._counts.pop(topic, None)

    def counts(self) -> dict[str, int]:
        """Every topic's fired, un-acked count (topics with none left out)."""
        with self._lock:
            return dict(self._counts)

    def top(self, n: int) -> dict[str, int]:
        """The `n` topics with the largest backlog, and the rest summed as "other" (a
        topic named "other" is then merged into it: bounded label cardinality first)."""
        with self._lock:
            ranked = sorted(self._counts.items(), key=lambda item: -item[1])
        top = dict(ranked[:n])
        rest = sum(count for _, count in ranked[n:])
        if rest or "other" in top:
            top["other"] = top.get("other", 0) + rest
        return top


def engine_gauges(engine, store, counts, unacked: UnackedByTopic, top_topics: int) -> dict:
    """The gauges of one engine (see module doc): a plain dict that pickles."""
    families = store.database.families
    rocks = {
        name: sum(int(families[f].property_int_value(prop) or 0) for f in keys.ALL_COLUMN_FAMILIES)
        for name, prop in ROCKS_PROPERTIES.items()
    }
    return {
        "writer_up": engine.writer_running(),
        "writer_queue_ops": engine.queued_ops(),
        "fire_lag_ms": engine.admission.lag_ms,  # the writer's latest (wheels.admission)
        "admission_refusing": engine.admission.refusing,
        "admission_due_load_pct": engine.admission.due.load_pct,  # the due-load projection
        "pending_by_wheel": {w: store.estimate_keys(keys.CF_WHEEL[w]) for w in WHEELS},
        "unacked_by_topic": unacked.top(top_topics),
        "due_within_ms": counts.due_within(engine.now_ms(), DUE_HORIZONS_MS),
        "data_dir_free_bytes": shutil.disk_usage(engine.settings.data_dir).free,
        "thread_cpu_s": thread_cpu_seconds(),  # the engine process's threads, by kind
        **rocks,
    }
