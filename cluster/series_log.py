"""Recurring series in cluster mode: every change the engine makes to a series, logged in
the series' partition as the engine committed it (docs/cluster.md, "Recurring series").

A series lives in the partition of its id, and its occurrences `<series id>#<n>` with it
(`timerwheel.cluster.partitions`). The owner's engine sends, moves, pauses, steps and
retires it, most of that on its own (a step is a fire, in the writer's tick), so the
node listens to the engine (`Engine.add_series_listener`): after each commit that changed
a series, on the writer thread and before that commit's callers are answered, each change
goes to the partition's appender as a `series` entry (`timerwheel.cluster.journal`): the
occurrences it fired and the series as left, its `extras` (next number, time, paused)
included. The log thus holds the series in commit order, and a takeover restores it
where it was: its next occurrence at its time and number, its un-acked occurrences fired
again (duplicates by id, as any un-acked delivery), its acked ones not.

A change of a partition this node is taking over (its restore fires an overdue series)
is held until the takeover's appender exists and then appended first; a change of a
partition the node does not own is not logged (its new owner has the series from the
log). A caller that changed a series (Send, PauseSeries, ResumeSeries) waits for the
change's record (`series_logged`) before it is answered, as for any other change.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import TYPE_CHECKING

from timerwheel.cluster import journal
from timerwheel.cluster.appender import MAX_RECORD_BYTES, LogUnavailable
from timerwheel.cluster.partitions import partition_of
from timerwheel.store import records
from timerwheel.store.batch import SeriesChange

PART_BYTES = MAX_RECORD_BYTES // 4

if TYPE_CHECKING:
    from timerwheel.cluster.appender import Appender
    from timerwheel.cluster.settings import NodeSettings


def entry_of(change: SeriesChange) -> journal.SeriesState:
    """The log entry of one change the engine made to a series."""
    sent = None
    if change.record is not None:
        timer = records.decode_timer(change.series_id, change.record)
        sent = journal.Sent(
            change.series_id, timer.topic, timer.body, dict(timer.properties),
            timer.deliver_at_ms, change.extras or b"",
        )  # fmt: skip
    return journal.SeriesState(change.series_id, sent, change.occurrences)


class SeriesLog:
    """Mixed into `ClusterNode`: the engine's series listener, and what callers wait on."""

    node: NodeSettings
    _owned: dict[int, Appender]
    _taking: set[int]

    def _init_series_log(self) -> None:
        self.series_lock = threading.RLock()  # also held while a takeover adds its appender
        self._series_held: dict[int, list[journal.SeriesState]] = {}  # partitions being taken
        self._series_logged: dict[str, Future] = {}  # the last record of each series

    def on_series_changes(self, changes: list[SeriesChange]) -> None:
        """The engine's series listener (writer thread, after the commit)."""
        by_partition: dict[int, list[journal.SeriesState]] = {}
        for change in changes:
            partition = partition_of(change.series_id, self.node.partitions)
            by_partition.setdefault(partition, []).append(entry_of(change))
        with self.series_lock:
            for partition, entries in by_partition.items():
                appender = self._owned.get(partition)
                if appender is not None:
                    for part in _parts(entries):  # each inside one record's size
                        future = appender.submit(list(part))
                        for entry in part:
                            self._note(entry.series_id, future)
                    continue
                if partition in self._taking:
                    self._series_held.setdefault(partition, []).extend(entries)
                    continue
                future = Future()
                future.set_exception(LogUnavailable(f"partition {partition} left this node; retry"))
                for entry in entries:
                    self._note(entry.series_id, future)

    def _note(self, series_id: str, future: Future) -> None:
        self._series_logged[series_id] = future

        def done(finished: Future) -> None:  # kept only while pending or failed
            if finished.exception() is None:
                with self.series_lock:
                    if self._series_logged.get(series_id) is finished:
                        del self._series_logged[series_id]

        future.add_done_callback(done)

    def series_logged(self, series_id: str) -> Future | None:
        """The record of the series' last change, if it is not in the log yet or failed
        (None: logged, or never changed)."""
        with self.series_lock:
            return self._series_logged.get(series_id)

    def series_taken(self, partition: int, appender: Appender) -> None:
        """A takeover's appender exists (called with `series_lock` held): the changes its
        restore made go first."""
        for part in _parts(self._series_held.pop(partition, [])):
            future = appender.submit(list(part))
            for entry in part:
                self._note(entry.series_id, future)

    def series_dropped(self, partition: int) -> None:
        """A takeover ended without the partition: what it held is not logged."""
        with self.series_lock:
            self._series_held.pop(partition, None)


def _parts(entries: list[journal.SeriesState]) -> list[list[journal.SeriesState]]:
    """`entries` in runs whose bodies stay inside a quarter of a record (many series may
    fire in one commit, each change carrying its series' body)."""
    parts: list[list[journal.SeriesState]] = []
    size = 0
    for entry in entries:
        body = journal.body_bytes(entry)
        if not parts or (parts[-1] and size + body > PART_BYTES):
            parts.append([])
            size = 0
        parts[-1].append(entry)
        size += body
    return parts
