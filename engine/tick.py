"""The writer's tick: the time-driven work staged into each group commit.

Before a group commit stages any caller's operation, the tick stages, against the
scheduler's `now_ms`:
 1. one chunk of every running cascade, top level first (hour to minute before minute
    to second, so a timer moved down this commit can move on in the next). A chunk is a
    range scan of the upper wheel of at most `cascade_chunk` keys; the keys in it already
    due fire at once instead of moving (a cascade that ran late must not place a timer
    in the past);
 2. one chunk of firing: the second wheel's keys from the scheduler's `fire_from`
    through `now_ms`, at most `fire_chunk` of them, each record turned FIRED with the
    next fire sequence number and a `ready` entry;
 3. the recurring series step 1-2 found due (`timerwheel.engine.series`): each occurrence out and
    the series on to its next time, in this same batch;
 4. once a second, one chunk of the retention sweep (`sweep_chunk` expired records).
Each step reports whether it stopped at its chunk's limit; the writer then runs again at
once instead of sleeping, so a backlog drains a chunk per commit and no commit holds the
fires behind it for long (why cascade chunks are small: `Settings.cascade_chunk`).

Each stage also tells the admission gate (`timerwheel.wheels.admission`) how late the
fires it staged ran: now minus the earliest due time among them, 0 when none was due;
and, once every `SAMPLE_MS`, the process's CPU time, the sends committed and timers
fired since the last sample and the due load ahead (`DueHorizon`, which the writer
feeds once a commit with the deliver times of the sends it committed: `committed_sends`).

`next_due_ms` is the other half: when the tick will next have work, for the writer's
sleep. The tick decides nothing about time itself; the scheduler (`timerwheel.wheels.scheduler`)
does, and the tick turns its verdicts (a cascade task, a fire range) into store writes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from timerwheel.engine.ops import WriterContext
from timerwheel.engine.series import fire_due_series
from timerwheel.observability import metrics
from timerwheel.store import keys
from timerwheel.store.batch import StagedBatch
from timerwheel.wheels.admission import SAMPLE_MS, Admission, DueHorizon
from timerwheel.wheels.scheduler import CascadeTask
from timerwheel.wheels.settings import Settings

SWEEP_INTERVAL_MS = 1_000


class Tick:
    def __init__(self, settings: Settings, ctx: WriterContext) -> None:
        self._settings = settings
        self._ctx = ctx
        self._store = ctx.store
        self._scheduler = ctx.scheduler
        self._sweep_from = b""
        self._next_sweep_ms = 0
        self.admission = Admission(settings.admit_fire_lag_ms, settings.admit_due_load_pct)
        # (refusing, lag_ms, load_pct) after each stage: the engine process shares it with
        # the gRPC workers (timerwheel.procs.admission_cell)
        self.on_admission: Callable[[bool, int, int], None] | None = None
        # The process's CPU clock (s) for the due-load rule's costs: the writer sets
        # time.process_time under the system clock; a test in virtual time its own; None:
        # no samples (the rule admits).
        self.cpu_clock: Callable[[], float] | None = None
        self.due = DueHorizon()
        self._sends = self._fires = 0  # since the last sample
        self._next_sample_ms = 0
        self._earliest_due_ms: int | None = None  # of the fires staged this time

    def stage(self, batch: StagedBatch, now_ms: int) -> bool:
        """Stage steps 1-4 into `batch`. True when a step has more to do now."""
        more = False
        self._earliest_due_ms = None
        for task in self._scheduler.cascade_tasks():
            started = time.perf_counter()
            more |= self._cascade_chunk(batch, task, now_ms)
            metrics.recorder().cascade_chunk(task.upper.name, time.perf_counter() - started)
        more |= self._fire_chunk(batch, now_ms)
        if batch.series_due:  # due recurring series: occurrence out, next one in, before
            fire_due_series(self._ctx, batch, now_ms)  # any operation reads them
        if now_ms >= self._next_sweep_ms:
            more |= self._sweep_chunk(batch, now_ms)
        earliest = self._earliest_due_ms
        lag_ms = max(now_ms - earliest, 0) if earliest is not None else 0
        gate = self.admission
        refusing = gate.observe(now_ms, lag_ms)
        if now_ms >= self._next_sample_ms and self.cpu_clock is not None:
            self._sample(now_ms)
            refusing = gate.refusing
        if self.on_admission is not None:  # a refusal names what caused it
            lag, due = gate.lag, gate.due
            late_ms = lag.late_ms if lag.refusing else lag_ms
            self.on_admission(refusing, late_ms, due.load_pct if due.refusing else 0)
        return more

    def committed_sends(self, deliver_times_ms: list[int], now_ms: int) -> None:
        """A commit stored these sends: their due seconds count toward the due load."""
        self._sends += len(deliver_times_ms)
        self.due.add(deliver_times_ms, now_ms)

    def _sample(self, now_ms: int) -> None:
        self._next_sample_ms = now_ms + SAMPLE_MS
        cpu_s = self.cpu_clock()  # type: ignore[misc]  (checked by the caller)
        due_per_s = self.due.due_per_s(now_ms)
        gate = self.admission
        saturated = gate.lag.refusing  # the fires run late: what the process gets is all
        gate.due.sample(now_ms, cpu_s, self._sends, self._fires, due_per_s, saturated)
        self._sends = self._fires = 0

    def _fired_due(self, key: bytes) -> None:
        """A chunk fired keys from `key` on (in time order): the earliest due so far?"""
        due_ms = keys.key_time_ms(key)
        if self._earliest_due_ms is None or due_ms < self._earliest_due_ms:
            self._earliest_due_ms = due_ms

    def next_due_ms(self) -> int:
        """When the tick next has work: the next second-wheel key's fire, a cascade's
        start or step (`Scheduler.next_wakeup_ms`), or the next sweep."""
        fire_from, _ = self._scheduler.fire_range()
        next_key = self._store.first_key("second", keys.encode_timer_key(fire_from))
        next_due_ms = keys.key_time_ms(next_key) if next_key is not None else None
        return min(self._scheduler.next_wakeup_ms(next_due_ms), self._next_sweep_ms)

    def _cascade_chunk(self, batch: StagedBatch, task: CascadeTask, now_ms: int) -> bool:
        """Move one chunk of the task's range down; timers already due fire instead."""
        limit = self._settings.cascade_chunk
        lo, hi = keys.encode_timer_key(task.from_key), keys.time_bound(task.to_ms)
        entries = self._store.scan(task.upper.name, lo, hi, limit)
        due_count = _count_due(entries, now_ms)
        if due_count:
            self._fired_due(entries[0][0])
            self._fires += due_count
            first_seq = self._scheduler.take_fire_seqs(due_count)
            self._store.stage_fire(batch, task.upper.name, entries[:due_count], first_seq, now_ms)
        self._store.stage_move(batch, task.upper.name, task.lower.name, entries[due_count:], now_ms)
        next_from = keys.key_after(entries[-1][0]) if len(entries) == limit else None
        self._scheduler.cascade_progress(task, next_from)
        return next_from is not None

    def _fire_chunk(self, batch: StagedBatch, now_ms: int) -> bool:
        limit = self._settings.fire_chunk
        fire_from, through_ms = self._scheduler.fire_range()
        lo, hi = keys.encode_timer_key(fire_from), keys.time_bound(through_ms + 1)
        entries = self._store.scan("second", lo, hi, limit)
        if entries:
            self._fired_due(entries[0][0])
            self._fires += len(entries)
            first_seq = self._scheduler.take_fire_seqs(len(entries))
            self._store.stage_fire(batch, "second", entries, first_seq, now_ms)
        next_from = keys.key_after(entries[-1][0]) if len(entries) == limit else None
        self._scheduler.fire_progress(through_ms, next_from)
        return next_from is not None

    def _sweep_chunk(self, batch: StagedBatch, now_ms: int) -> bool:
        limit = self._settings.sweep_chunk
        resume = self._store.stage_sweep(batch, self._sweep_from, now_ms, limit)
        # Expiry keys are always written at now + retention, so once everything up to now
        # is swept the next sweep can start there and skip the swept tombstones.
        self._sweep_from = resume or keys.time_bound(now_ms + 1)
        if resume is None:
            self._next_sweep_ms = now_ms + SWEEP_INTERVAL_MS
        return resume is not None


def _count_due(entries: list[tuple[bytes, bytes]], now_ms: int) -> int:
    """Entries are in time order, so the due ones are a prefix."""
    for index, (key, _) in enumerate(entries):
        if keys.key_time_ms(key) > now_ms:
            return index
    return len(entries)
