"""The single writer: every mutation of the store goes through it, one group commit at a time.

It builds one WriteBatch per iteration and commits it with the WAL on: a *group
commit*. Callers block on a future completed only after their batch is durable (fsynced,
by default), so anything acknowledged to a producer survives `kill -9` and a machine
crash. Because only the writer mutates, a cascade, a send and a fire never interleave
inside a slot.

One iteration, in order:
 1. observe the clock (the scheduler keeps a monotonic `now_ms`);
 2. the tick (`timerwheel.engine.tick`): one chunk of every running cascade (top level first),
    one chunk of firing out of the second wheel, the recurring series found due, and
    once a second a chunk of the retention sweep;
 3. apply the queued operations (up to `max_group_ops`; a twentieth of that while the
    admission gate refuses sends because the fires run late, so a commit of queued
    sends never holds the next fire chunk back for long), each checked before staged (a
    series due at once when sent or rescheduled fires inside its operation);
 4. stage the scheduler state into `meta` and the pending-timer counters the batch
    changed (`timerwheel.store.counts`, from the deltas steps 2-3 noted), and write the batch to
    the WAL, without an fsync;
 5. update the in-memory counters; hand the operations whose callers wait on
    durability (`Op.durable`) to the WAL syncer, which completes their futures after
    an fsync that covers this commit (see "Which commits fsync" below), and complete
    the others' now; then tell fired-listeners which topics fired.
The tick comes first so operations are placed against the horizons as they will be
committed. With nothing to do, the writer sleeps until the next due timer or cascade
start, or until an operation arrives: the second wheel is drained continuously, not
once a second.

Which commits fsync, and where: only those a caller waits on (a send, cancel or ack),
and not on this thread. Under steady load about half the group commits carry no caller,
only fires (timers due every millisecond), cascade chunks, sweeps or delivery trace
events, and their fsyncs kept the writer waiting a third of a run (docs/lab-log.md has
the runs): those get none. That loses nothing anybody was promised: the WAL is in the
kernel once `write` returns, so the death of any process keeps them; the next fsync (for
a send, cancel or ack, at most milliseconds away under load) covers their bytes too; and
a machine crash before that loses a suffix of the WAL, which RocksDB recovers as a
consistent prefix, so a fire lost that way fires again (at least once).
The fsyncs a caller waits on run on the WAL syncer's thread (`timerwheel.engine.wal_syncer` says
why, and what a failed one does); while one runs the writer fires what falls due but
commits queued operations only after it (`_sleep_until_due`), so group commits stay as
large. A commit is visible to readers once written, a moment before it is durable: a
timer sent already due may be delivered before its producer is answered, and if the
machine crashes before the fsync it is gone, unanswered, and sent again by its producer.

Which ops wake the writer: every op but delivery trace events (`Op.linger_ms`). At
moderate send rates half the writer's iterations were a commit of one delivery's trace
events alone, queued a fraction of a millisecond after the fire commit that led to them
and before the next one. Such an op lingers (`timerwheel.engine.linger`): it goes into
the next group commit the writer makes anyway (the next fire, send or ack) or, when
there is none, one made `linger_ms` after it was queued. A reader of what they write (a
message's trace) first commits what lingers (`Engine.get`, `TraceBarrier`), so it sees
every event recorded before it asked.

A failing iteration or idle read is not the end of the writer: `timerwheel.engine.store_health`
decides whether it is retried with backoff (a read error), waited out with a reopen of
the store (a full disk), or fatal (a failed WAL sync), and tells the server so.

Without a thread (`background=False`), callers drive the same iterations inline, and
the writer fsyncs in step 4 itself, before anybody is answered: that is how tests run
the writer in virtual time.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future

import structlog

from timerwheel.common import TimerwheelError
from timerwheel.engine.commit_counts import commit_counts
from timerwheel.engine.linger import Lingering
from timerwheel.engine.ops import Op, WriterContext
from timerwheel.engine.send_op import SendOp
from timerwheel.engine.store_health import StoreHealth, WriterFailed
from timerwheel.engine.system_clock import SystemClock
from timerwheel.engine.tick import Tick
from timerwheel.engine.wal_syncer import WalSyncer, complete, fail
from timerwheel.observability import metrics
from timerwheel.store.batch import SeriesChange, StagedBatch
from timerwheel.store.counts import CountChanges, PendingCounts
from timerwheel.store.rocks import WalSyncFailed
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.clock import Clock
from timerwheel.wheels.domain import Overloaded, ShuttingDown
from timerwheel.wheels.scheduler import Scheduler
from timerwheel.wheels.settings import Settings

log = structlog.get_logger("timerwheel.writer")

FiredListener = Callable[[set[str]], None]
# After a commit that changed a series, before its callers are answered (cluster.series_log)
SeriesListener = Callable[[list[SeriesChange]], None]
# Re-check the clock at least this often when idle, so a wall-clock step cannot strand
# the writer in a long sleep computed from the old time.
MAX_IDLE_SLEEP_S = 0.25
# While the fires run late, a commit takes this share of `max_group_ops` (`_take_ops`).
LAGGING_SHARE = 20


class Writer:
    def __init__(
        self,
        settings: Settings,
        clock: Clock,
        store: TimerStore,
        scheduler: Scheduler,
        on_commit_fired: Callable[
            [dict[str, list[tuple[int, bytes, bytes]]], dict[str, list[int]]], None
        ],
        counts: PendingCounts,
        health: StoreHealth | None = None,
    ) -> None:
        self._settings = settings
        self._clock = clock
        self._store = store
        self._scheduler = scheduler
        self._on_commit_fired = on_commit_fired  # before listeners: they read what it keeps
        self._counts = counts
        self.health = health or StoreHealth(settings.data_dir)
        if store.database.read_only:  # a start on a full disk: reads only, until room
            self.health.opened_read_only()
        self._ctx = WriterContext(store, scheduler, settings.retention_ms)
        self.tick = Tick(settings, self._ctx)
        if isinstance(clock, SystemClock):  # real time: the due-load rule measures costs
            self.tick.cpu_clock = time.process_time
        self._cond = threading.Condition()
        self._queue: deque[Op] = deque()
        self._queued_weight = 0
        self._queued_urgent = 0  # queued ops without a linger: the writer runs at once
        self._lingering = Lingering()
        self._asleep_until_ms: int | None = None  # while the writer waits for work
        self._listeners: list[FiredListener] = []
        self._series_listeners: list[SeriesListener] = []
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._syncer: WalSyncer | None = None  # with a thread: fsyncs behind the writer

    # == control ========================================================================
    def start(self) -> None:
        self._syncer = WalSyncer(self._store.sync_wal, self._wake)
        self._syncer.start()
        self._thread = threading.Thread(target=self._run, name="timerwheel-writer", daemon=True)
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    @property
    def background(self) -> bool:
        return self._thread is not None

    def add_listener(self, listener: FiredListener) -> None:
        self._listeners.append(listener)

    def add_series_listener(self, listener: SeriesListener) -> None:
        self._series_listeners.append(listener)

    @property
    def queued_weight(self) -> int:
        return self._queued_weight

    def stop(self) -> None:
        """Refuse new operations, finish the queued ones, stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._syncer.stop()
        else:
            while self._queue:
                self.iterate()

    # == operations =====================================================================
    def submit(self, op: Op) -> Future:
        with self._cond:
            if self._stopping:
                raise ShuttingDown(self.health.failure or "the timer engine is shutting down")
            self.health.refuse_if_full()
            limit = self._settings.max_queued_ops
            if op.sheddable and self._queued_weight + op.weight > limit and self._queue:
                raise Overloaded(
                    f"writer queue holds {self._queued_weight} operations (limit {limit}); "
                    "retry later"
                )
            self._queue.append(op)
            self._queued_weight += op.weight
            if self._wakes_writer(op):
                self._cond.notify()
        return op.future

    def _wakes_writer(self, op: Op) -> bool:
        """Whether the writer must wake for `op` (call with `_cond` held): an urgent op
        unless a WAL sync runs (the writer commits queued ops only after it, and the
        syncer wakes it then: `_wake`); a lingering one only when the writer sleeps past
        its linger."""
        if not op.linger_ms:
            self._queued_urgent += 1
            return self._syncer is None or not self._syncer.busy
        self._lingering.queued(self._clock.now_ms(), op.linger_ms)
        return self._lingering.wakes(self._asleep_until_ms)

    def wait(self, future: Future):
        """The future's result; without a thread, run iterations until it is done."""
        if self._thread is None:
            while not future.done():
                self.iterate()
        return future.result()

    def _take_ops(self) -> list[Op]:
        """The queued ops of the next commit, in order, up to `max_group_ops` of weight.

        While the admission gate refuses sends (the fires run late), up to a twentieth of
        it: the sends already admitted wait a little longer, which their producers see as
        latency, instead of the fires waiting behind one long commit of them (a commit of
        `max_group_ops` sends takes the writer a large part of a second). Order is kept,
        so an op never overtakes an earlier one on the same id."""
        ops: list[Op] = []
        weight = 0
        limit = self._settings.max_group_ops
        if self.tick.admission.lag.refusing:  # fires late (not the due-load rule)
            limit = max(1, limit // LAGGING_SHARE)
        with self._cond:
            while self._queue and (not ops or weight + self._queue[0].weight <= limit):
                op = self._queue.popleft()
                weight += op.weight
                ops.append(op)
            self._queued_weight -= weight
            self._queued_urgent -= sum(1 for op in ops if not op.linger_ms)
            self._lingering.taken(queue_empty=not self._queue)
        return ops

    # == the loop =======================================================================
    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopping and not self._queue:
                        return
                try:
                    if self._syncer.failure is not None:
                        raise self._syncer.failure
                    if self.health.recovering:  # the disk was full: reopen first,
                        self._syncer.wait_idle()  # with no sync running on the store
                        if not self.health.recover(self._store, self._scheduler):
                            self._back_off()
                        continue
                    ticking = self._group_commit()
                    self.health.succeeded()
                    if not ticking:
                        self._sleep_until_due()  # at once for an urgent op, unless a sync runs
                except WriterFailed:
                    raise
                except Exception as exc:  # a failed WAL sync first: it is the cause
                    exc = self._syncer.failure or exc
                    self.health.iteration_failed(exc)  # raises WriterFailed when fatal
                    if self.health.recovering:  # a full disk: fail fast, don't queue
                        self._fail_queued(self.health.error_for(exc), stop=False)
                    self._back_off()
        except WriterFailed as exc:
            self._give_up(str(exc))
        except BaseException as exc:  # the writer must never die silently
            log.exception("writer_crashed")
            self._give_up(f"the timer writer crashed: {exc!r}")

    def _give_up(self, reason: str) -> None:
        """Stop for good: refuse everything, tell the health listeners (the server)."""
        self._fail_queued(ShuttingDown(f"the timer writer stopped: {reason}"))
        self.health.fail(reason)

    def _back_off(self) -> None:
        with self._cond:  # an operation arriving does not cut it short; stop does
            if not self._stopping:
                self._cond.wait(self.health.backoff_s())

    def _wake(self) -> None:
        """The syncer is idle: commit what waited for it. Nothing urgent queued, nothing
        to do: the writer sleeps on until its next due time (these wakes, and those for
        ops queued during a sync, were a third of the writer's wake-ups at moderate rates)."""
        with self._cond:
            if self._queued_urgent or self._stopping or self._syncer.failure is not None:
                self._cond.notify()

    def _sleep_until_due(self) -> None:
        """Sleep until the next due timer, cascade or sweep, a lingering op's time, or an
        urgent op; while the syncer has a sync running, queued ops wait for it."""
        due_ms = self.tick.next_due_ms()
        with self._cond:
            while not self._stopping and not (self._queued_urgent and not self._syncer.busy):
                wake_ms = self._lingering.sleep_until_ms(due_ms)
                now_ms = self._clock.now_ms()
                delay_s = min((wake_ms - now_ms) / 1000, MAX_IDLE_SLEEP_S)
                if delay_s <= 0:
                    return
                self._asleep_until_ms = now_ms + int(delay_s * 1000)
                notified = self._cond.wait(delay_s)
                self._asleep_until_ms = None
                if not notified:  # its time (or the idle cap: look at the clock again)
                    return

    def _fail_queued(self, error: BaseException, stop: bool = True) -> None:
        with self._cond:
            self._stopping |= stop
            ops = list(self._queue)
            self._queue.clear()
            self._queued_weight = 0
            self._queued_urgent = 0
            self._lingering.taken(queue_empty=True)
        fail(ops, error)

    def iterate(self) -> bool:
        """One group commit. True when more work is already waiting, lingering ops too
        (manual mode runs until they are committed)."""
        return self._group_commit() or bool(self._queue)

    def _group_commit(self) -> bool:
        """One group commit. True when a cascade or the firing has more to do now."""
        ops = self._take_ops()
        commit_s, wants_sync = 0.0, False
        saved = self._scheduler.state
        batch = StagedBatch()
        now_ms = self._scheduler.observe(self._clock.now_ms())
        try:
            self._store.prefetch(batch, [i for op in ops for i in op.reads()])
            more = self.tick.stage(batch, now_ms)
            outcomes = [_apply(op, self._ctx, batch, now_ms) for op in ops]
            counted: CountChanges | None = None
            if batch.operations or ops or self._scheduler.state != saved:
                self._store.stage_state(batch, self._scheduler.state)
                counted = self._counts.stage(batch)
                wants_sync = any(op.durable for op in ops)
                started = time.perf_counter()
                self._store.commit(batch, sync=False)
                commit_s = time.perf_counter() - started
                if wants_sync and self._syncer is None:
                    self._sync_wal()  # no syncer thread: here, before anybody is answered
        except WalSyncFailed as exc:
            # (No syncer thread.) The batch is applied but maybe not durable: its scheduler
            # state stays (what readers see), its operations are not acknowledged, and the
            # writer stops.
            # Carrying on could reuse fire sequence numbers of a batch that is in RocksDB.
            stopped = ShuttingDown(f"the timer writer stopped: {exc}")
            fail(ops, stopped)
            self._fail_queued(stopped)
            raise
        except BaseException as exc:
            self._scheduler.restore(saved)  # nothing of this batch is on disk
            error = self.health.error_for(exc)  # e.g. DiskFull, naming the data dir
            fail(ops, error)
            raise
        if counted:
            self._counts.committed(counted)
        for op in ops:  # the due load ahead, for admission (one count a send op)
            if type(op) is SendOp:
                self.tick.committed_sends(op.deliver_times_ms, now_ms)
        if batch.series_changes:  # before any caller of this batch is answered
            _call_each(self._series_listeners, batch.series_changes, "series_listener_failed")
        if wants_sync and self._syncer is not None:
            self._syncer.hand_over(ops, outcomes)  # answered once the WAL is synced
        else:
            complete(ops, outcomes)
        recorder = metrics.recorder()
        if commit_s and recorder.enabled:  # counted only for metrics that are on
            recorder.committed(commit_counts(ops, outcomes), batch.fired_entries, commit_s)
        if batch.fired_topics or batch.retired:
            self._on_commit_fired(batch.fired_entries, batch.retired)
        if batch.fired_topics:
            self._notify(batch.fired_topics)
        return more or self._scheduler.busy()

    def _sync_wal(self) -> None:
        started = time.perf_counter()
        self._store.sync_wal()
        metrics.recorder().wal_synced(time.perf_counter() - started)

    def _notify(self, topics: set[str]) -> None:
        _call_each(self._listeners, topics, "fired_listener_failed")


def _call_each(listeners: list, argument: object, failed: str) -> None:
    for listener in listeners:
        try:
            listener(argument)
        except Exception:
            log.exception(failed)


def _apply(op: Op, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> tuple[bool, object]:
    """Run one operation; a refusal is its outcome, not the batch's failure."""
    try:
        return True, op.apply(ctx, batch, now_ms)
    except TimerwheelError as exc:
        return False, exc
