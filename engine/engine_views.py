"""What operators read of an engine: its health, gauges, stats, lateness and topics, and
the export of a consistent cut. `Engine` mixes this in (engine/engine.py keeps the timer
API and the writer's lifecycle); nothing here is on a message's path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from timerwheel.observability.gauges import engine_gauges
from timerwheel.observability.thread_cpu import thread_cpu_seconds
from timerwheel.store import keys
from timerwheel.store.export_root import ExportSlot, check_space
from timerwheel.wheels.lateness import LatenessMinute, RecentLateness

if TYPE_CHECKING:
    from timerwheel.engine.backlog import Backlog
    from timerwheel.engine.clock_watch import ClockWatch
    from timerwheel.engine.store_health import StoreHealth
    from timerwheel.engine.writer import Writer
    from timerwheel.store.counts import PendingCounts
    from timerwheel.store.rocks import RocksDatabase
    from timerwheel.store.timer_store import TimerStore
    from timerwheel.wheels.scheduler import Scheduler
    from timerwheel.wheels.settings import Settings


class EngineViews:
    settings: Settings
    export_slot: ExportSlot
    _writer: Writer
    _store: TimerStore
    _database: RocksDatabase
    _counts: PendingCounts
    _backlog: Backlog
    _lateness: RecentLateness
    _scheduler: Scheduler
    _clock_watch: ClockWatch

    def now_ms(self) -> int:
        raise NotImplementedError

    def export(
        self, out_dir: str, max_rows_per_file: int = 0, reserve_bytes: int = 0, progress=None,
        **how,
    ):  # fmt: skip
        """Write a consistent cut of the live store as SST files (see timerwheel.store.export;
        `how`: its `workers` and `parallel_min_rows`). A large store is written by worker
        processes, so the export no longer holds this process's GIL row by row.

        One at a time (a second call meanwhile is refused, Overloaded), and only when it
        leaves `reserve_bytes` free on `out_dir`'s disk. Guarded here, in the engine's
        process, so the gRPC workers of `serve --workers N` share the one slot.
        """
        from timerwheel.store.export import export_database

        with self.export_slot.take():
            check_space(out_dir, self.settings.data_dir, reserve_bytes)
            return export_database(
                self._database, out_dir, max_rows_per_file=max_rows_per_file,
                progress=progress, now_ms=self.now_ms, **how,
            )  # fmt: skip

    def writer_running(self) -> bool:
        """False once a background writer has stopped (closed, or failed for good)."""
        return self._writer.running

    @property
    def health(self) -> StoreHealth:
        """The writer's fault state (timerwheel.engine.store_health): disk full, failed for good."""
        return self._writer.health

    def queued_ops(self) -> int:
        return self._writer.queued_weight

    def metrics_gauges(self, top_topics: int) -> dict:
        """Scrape-time gauges (timerwheel.observability.gauges): in memory or RocksDB properties
        only."""
        return engine_gauges(self, self._store, self._counts, self._backlog.by_topic, top_topics)

    def fire_lateness(self) -> list[LatenessMinute]:
        """Fire lateness per minute over the last hour (timerwheel.wheels.lateness), oldest
        first."""
        return self._lateness.recent(self.now_ms())

    def topics(self) -> list[tuple[str, int, int]]:
        """(topic, pending, fired_unacked) of every topic with either, by name."""
        pending = self._counts.totals()
        unacked = self._backlog.by_topic.counts()
        return [(t, pending.get(t, 0), unacked.get(t, 0)) for t in sorted({*pending, *unacked})]

    def stats(self) -> dict:
        """Counters of the engine, and its process's CPU by kind of thread (`thread_cpu_s`,
        timerwheel.observability.thread_cpu: read in the process the writer runs in)."""
        state = self._scheduler.state
        counts = {f"keys_{n}": self._store.estimate_keys(n) for n in keys.ALL_COLUMN_FAMILIES}
        queued = self._writer.queued_weight
        return {
            "now_ms": state.now_ms, "fire_seq": state.fire_seq, "queued_ops": queued, **counts,
            **self._clock_watch.stats(), "thread_cpu_s": thread_cpu_seconds(),
            **self._backlog.throughput(),
        }  # fmt: skip
