"""The in-process engine: the public timer API over the store, run by one writer thread.

Every mutation (sends, cancels, acks, cascades, fires, retention sweeps) goes through
the single writer, which builds one WriteBatch per iteration and commits it with the
WAL on (and fsync by default): a *group commit*. Callers block on a future that is
completed only after their batch is durable, so anything acknowledged to a producer
survives `kill -9`. Because only the writer mutates, a cascade, a send and a fire never
interleave inside a slot.

One writer iteration, in order:
 1. observe the clock (monotonic `now_ms`);
 2. tick: one chunk of every running cascade (top level first), one chunk of firing
    out of the second wheel, one chunk of the retention sweep;
 3. apply the queued operations (up to `max_group_ops`), each checked before staged;
 4. stage the scheduler state into `meta` and commit the batch;
 5. complete the operations' futures, then tell fired-listeners which topics fired.
The tick comes first so operations are placed against the horizons as they will be
committed. With nothing to do, the writer sleeps until the next due timer or cascade
start, or until an operation arrives: the second wheel is drained continuously, not
once a second.

Tests construct the engine with `background=False` and a `VirtualClock`: then no
thread runs and calls drive the same iteration inline (`run_until_idle`).
"""

from __future__ import annotations

import base64
import binascii
import itertools
import secrets
import threading
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import replace

import structlog

from server.ops import AckOp, CancelOp, Op, PreparedSend, SendOp, WriterContext
from store import keys
from store.records import encode_new
from store.rocks import RocksDatabase, RocksTuning
from store.timer_store import StagedBatch, TimerStore
from wheels.clock import Clock
from wheels.domain import (
    FiredTimer,
    InvalidArgument,
    NotFound,
    Overloaded,
    SendResult,
    SendSpec,
    ShuttingDown,
    State,
    Timer,
)
from wheels.scheduler import CascadeTask, Scheduler, TimerKey
from wheels.settings import Settings
from wheels.validation import validate_message_id, validate_send, validate_topic

log = structlog.get_logger("timerwheel.engine")

FiredListener = Callable[[set[str]], None]
MAX_LIST_LIMIT = 1_000
LIST_SCAN_BUDGET = 200_000
SWEEP_INTERVAL_MS = 1_000
# Re-check the clock at least this often when idle, so a wall-clock step cannot strand
# the writer in a long sleep computed from the old time.
MAX_IDLE_SLEEP_S = 0.25


class MessageIds:
    """Server-made message ids: a random per-start prefix and a counter, 32 hex digits."""

    def __init__(self) -> None:
        self._prefix = secrets.token_hex(8).upper()
        self._counter = itertools.count(1)

    def next(self) -> str:
        return f"{self._prefix}{next(self._counter):016X}"


class Engine:
    def __init__(self, settings: Settings, clock: Clock, *, background: bool = True) -> None:
        self.settings = settings
        self._clock = clock
        tuning = RocksTuning(
            settings.block_cache_bytes, settings.write_buffer_bytes, settings.sync_writes
        )
        self._database = RocksDatabase(settings.data_dir, tuning)
        self._store = TimerStore(self._database)
        leads = (settings.minute_cascade_lead_ms, settings.hour_cascade_lead_ms)
        state = self._store.load_state()
        if state is None:
            self._scheduler = Scheduler.fresh(clock.now_ms(), leads)
        else:
            self._scheduler = Scheduler(state, leads)
        self._ctx = WriterContext(self._store, self._scheduler, settings.retention_ms)
        self._ids = MessageIds()
        self._cond = threading.Condition()
        self._queue: deque[Op] = deque()
        self._queued_weight = 0
        self._listeners: list[FiredListener] = []
        self._sweep_from = b""
        self._next_sweep_ms = 0
        self._stopping = False
        self._closed = False
        self._thread: threading.Thread | None = None
        log.info(
            "engine_opened", data_dir=settings.data_dir, recovered=state is not None,
            now_ms=self._scheduler.now_ms, fire_seq=self._scheduler.state.fire_seq,
            cascades_pending=self._scheduler.busy(),
        )  # fmt: skip
        if background:
            self._thread = threading.Thread(target=self._run, name="timerwheel-writer", daemon=True)
            self._thread.start()

    # == the public API =================================================================
    def now_ms(self) -> int:
        return max(self._clock.now_ms(), self._scheduler.now_ms)

    def send(self, spec: SendSpec) -> SendResult:
        return self.send_batch([spec])[0]

    def send_batch(self, specs: Iterable[SendSpec]) -> list[SendResult]:
        """Store sends atomically; returns when they are durable."""
        return self._await(self.send_batch_async(specs))

    def send_batch_async(self, specs: Iterable[SendSpec]) -> Future:
        specs = list(specs)
        if len(specs) > self.settings.max_batch_messages:
            raise InvalidArgument(
                "messages", f"<{len(specs)} messages>",
                f"at most {self.settings.max_batch_messages} per batch",
            )  # fmt: skip
        now_ms = self.now_ms()
        settings, next_id = self.settings, self._ids.next
        prepared = []
        for index, spec in enumerate(specs):
            try:
                deliver_at_ms = validate_send(spec, now_ms, settings)
            except InvalidArgument as exc:
                raise (exc.within(f"messages[{index}].") if len(specs) > 1 else exc) from None
            record = encode_new(
                spec.when.kind, spec.when.value, deliver_at_ms, now_ms,
                spec.topic, spec.properties, spec.body,
            )  # fmt: skip
            message_id = spec.message_id or next_id()
            prepared.append(
                PreparedSend(spec, message_id, deliver_at_ms, now_ms, bool(spec.message_id), record)
            )
        return self._submit(SendOp(sends=prepared))

    def cancel(self, message_id: str) -> State:
        validate_message_id(message_id)
        return self._await(self._submit(CancelOp(message_id=message_id)))

    def ack(self, topic: str, message_ids: Iterable[str]) -> list[str]:
        """Retire fired messages; returns the ids that were FIRED on `topic` and are now ACKED."""
        validate_topic(topic, self.settings)
        ids = list(message_ids)
        for index, message_id in enumerate(ids):
            validate_message_id(message_id, f"message_ids[{index}]")
        if not ids:
            return []
        return self._await(self._submit(AckOp(topic=topic, message_ids=ids)))

    def get(self, message_id: str) -> Timer:
        validate_message_id(message_id)
        timer = self._store.get(message_id)
        if timer is None:
            raise NotFound(f"message_id={message_id!r}: no such timer")
        if timer.state is State.SCHEDULED:
            candidates = [w.name for w in self._scheduler.wheel_candidates(timer.deliver_at_ms)]
            timer = replace(timer, wheel=self._store.find_wheel(timer, candidates) or candidates[0])
        return timer

    def list_pending(
        self, topic: str, from_ms: int, to_ms: int, limit: int, page_token: str = ""
    ) -> tuple[list[Timer], str]:
        """Scheduled timers of `topic` due in [from_ms, to_ms), by time, one page at a time."""
        validate_topic(topic, self.settings)
        if from_ms < 0:
            raise InvalidArgument("from_ms", from_ms, "must not be negative")
        if to_ms <= from_ms:
            raise InvalidArgument("to_ms", to_ms, f"must be greater than from_ms ({from_ms})")
        if not 0 <= limit <= MAX_LIST_LIMIT:
            raise InvalidArgument("limit", limit, f"must be 0..{MAX_LIST_LIMIT} (0 means 100)")
        after = _decode_page_token(page_token)
        page = self._store.list_pending(
            topic, from_ms, to_ms, limit or 100, after, self._wheel_floors(), LIST_SCAN_BUDGET
        )
        timers = [self._with_wheel(t) for t in page.timers]
        token = _encode_page_token(page.next_after) if page.next_after else ""
        return timers, token

    def fetch_fired(self, topic: str, after_seq: int, limit: int) -> list[FiredTimer]:
        """Fired, un-acked messages of `topic` after fire sequence `after_seq`, in fire order."""
        return self._store.read_ready(topic, after_seq, limit)

    def ready_topics(self) -> list[str]:
        return self._store.ready_topics()

    def export(self, out_dir: str, max_rows_per_file: int = 0, progress=None):
        """Write a consistent cut of the live store as SST files (see store.export)."""
        from store.export import export_database

        return export_database(
            self._database, out_dir, max_rows_per_file=max_rows_per_file, progress=progress
        )

    def add_fired_listener(self, listener: FiredListener) -> None:
        """`listener(topics)` is called on the writer thread after each commit that fired."""
        self._listeners.append(listener)

    def queued_ops(self) -> int:
        return self._queued_weight

    def stats(self) -> dict[str, int]:
        state = self._scheduler.state
        counts = {
            f"keys_{name}": self._store.estimate_keys(name) for name in keys.ALL_COLUMN_FAMILIES
        }
        return {
            "now_ms": state.now_ms,
            "fire_seq": state.fire_seq,
            "queued_ops": self._queued_weight,
            **counts,
        }

    @property
    def store(self) -> TimerStore:
        return self._store

    @property
    def scheduler(self) -> Scheduler:
        return self._scheduler

    def step(self) -> bool:
        """Manual mode: run one writer iteration; True when more work is waiting."""
        if self._thread is not None:
            raise RuntimeError("step is for engines made with background=False")
        return self._iterate()

    def run_until_idle(self) -> None:
        """Manual mode: run writer iterations until nothing is due, queued or cascading."""
        if self._thread is not None:
            raise RuntimeError("run_until_idle is for engines made with background=False")
        while self._iterate():
            pass

    def close(self) -> None:
        """Stop accepting, finish queued writes, close RocksDB cleanly. Idempotent."""
        with self._cond:
            if self._closed:
                return
            self._stopping = True
            self._cond.notify_all()
        if self._thread is not None:
            self._thread.join()
        else:
            while self._queue:
                self._iterate()
        self._closed = True
        self._store.close()
        log.info("engine_closed", data_dir=self.settings.data_dir, now_ms=self._scheduler.now_ms)

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # == the writer =====================================================================
    def _submit(self, op: Op) -> Future:
        with self._cond:
            if self._stopping:
                raise ShuttingDown("the timer engine is shutting down")
            if self._queued_weight + op.weight > self.settings.max_queued_ops and self._queue:
                raise Overloaded(
                    f"writer queue holds {self._queued_weight} operations "
                    f"(limit {self.settings.max_queued_ops}); retry later"
                )
            self._queue.append(op)
            self._queued_weight += op.weight
            self._cond.notify()
        return op.future

    def _await(self, future: Future):
        if self._thread is None:
            while not future.done():
                self._iterate()
        return future.result()

    def _take_ops(self) -> list[Op]:
        ops: list[Op] = []
        weight = 0
        with self._cond:
            while self._queue and (
                not ops or weight + self._queue[0].weight <= self.settings.max_group_ops
            ):
                op = self._queue.popleft()
                weight += op.weight
                ops.append(op)
            self._queued_weight -= weight
        return ops

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    if self._stopping and not self._queue:
                        return
                busy = self._iterate_logged()
                if not busy:
                    self._sleep_until_due()
        except BaseException as exc:  # the writer must never die silently
            log.exception("writer_crashed")
            self._fail_queued(ShuttingDown(f"the timer writer stopped: {exc}"))
            raise

    def _iterate_logged(self) -> bool:
        try:
            return self._iterate()
        except Exception:
            log.exception("writer_iteration_failed")
            with self._cond:  # back off before retrying a failing store
                self._cond.wait(0.1)
            return True

    def _sleep_until_due(self) -> None:
        fire_from, _ = self._scheduler.fire_range()
        next_key = self._store.first_key("second", keys.encode_timer_key(fire_from))
        next_due_ms = keys.key_time_ms(next_key) if next_key is not None else None
        wake_ms = min(self._scheduler.next_wakeup_ms(next_due_ms), self._next_sweep_ms)
        with self._cond:
            if self._queue or self._stopping:
                return
            delay_s = min((wake_ms - self._clock.now_ms()) / 1000, MAX_IDLE_SLEEP_S)
            if delay_s > 0:
                self._cond.wait(delay_s)

    def _fail_queued(self, error: Exception) -> None:
        with self._cond:
            self._stopping = True
            ops = list(self._queue)
            self._queue.clear()
            self._queued_weight = 0
        for op in ops:
            op.future.set_exception(error)

    def _iterate(self) -> bool:
        """One group commit. True when more work is already waiting."""
        ops = self._take_ops()
        saved = self._scheduler.state
        batch = StagedBatch()
        now_ms = self._scheduler.observe(self._clock.now_ms())
        try:
            more = self._tick(batch, now_ms)
            outcomes = [_apply(op, self._ctx, batch, now_ms) for op in ops]
            if batch.operations or ops or self._scheduler.state != saved:
                self._store.stage_state(batch, self._scheduler.state)
                self._store.commit(batch)
        except BaseException as exc:
            self._scheduler.restore(saved)  # nothing of this batch is on disk
            for op in ops:
                op.future.set_exception(exc)
            raise
        for op, (ok, value) in zip(ops, outcomes, strict=True):
            if ok:
                op.future.set_result(value)
            else:
                op.future.set_exception(value)
        if batch.fired_topics:
            self._notify(batch.fired_topics)
        return more or self._scheduler.busy() or bool(self._queue)

    def _tick(self, batch: StagedBatch, now_ms: int) -> bool:
        more = False
        for task in self._scheduler.cascade_tasks():
            more |= self._cascade_chunk(batch, task, now_ms)
        more |= self._fire_chunk(batch, now_ms)
        if now_ms >= self._next_sweep_ms:
            resume = self._store.stage_sweep(
                batch, self._sweep_from, now_ms, self.settings.sweep_chunk
            )
            self._sweep_from = resume or b""
            if resume is None:
                self._next_sweep_ms = now_ms + SWEEP_INTERVAL_MS
            more |= resume is not None
        return more

    def _cascade_chunk(self, batch: StagedBatch, task: CascadeTask, now_ms: int) -> bool:
        """Move one chunk of the task's range down; timers already due fire instead."""
        limit = self.settings.cascade_chunk
        entries = self._store.scan(
            task.upper.name,
            keys.encode_timer_key(task.from_key),
            keys.time_bound(task.to_ms),
            limit,
        )
        due_count = _count_due(entries, now_ms)
        if due_count:
            first_seq = self._scheduler.take_fire_seqs(due_count)
            self._store.stage_fire(batch, task.upper.name, entries[:due_count], first_seq, now_ms)
        self._store.stage_move(batch, task.upper.name, task.lower.name, entries[due_count:])
        next_from = _key_after(entries[-1][0]) if len(entries) == limit else None
        self._scheduler.cascade_progress(task, next_from)
        return next_from is not None

    def _fire_chunk(self, batch: StagedBatch, now_ms: int) -> bool:
        limit = self.settings.fire_chunk
        fire_from, through_ms = self._scheduler.fire_range()
        entries = self._store.scan(
            "second", keys.encode_timer_key(fire_from), keys.time_bound(through_ms + 1), limit
        )
        if entries:
            first_seq = self._scheduler.take_fire_seqs(len(entries))
            self._store.stage_fire(batch, "second", entries, first_seq, now_ms)
        next_from = _key_after(entries[-1][0]) if len(entries) == limit else None
        self._scheduler.fire_progress(through_ms, next_from)
        return next_from is not None

    def _notify(self, topics: set[str]) -> None:
        for listener in self._listeners:
            try:
                listener(topics)
            except Exception:
                log.exception("fired_listener_failed")

    # == helpers ========================================================================
    def _wheel_floors(self) -> dict[str, bytes]:
        """Below these keys a wheel holds only tombstones, so list scans may start there."""
        state = self._scheduler.state
        floors = {"second": keys.encode_timer_key(state.fire_from)}
        return floors

    def _with_wheel(self, timer: Timer) -> Timer:
        candidates = [w.name for w in self._scheduler.wheel_candidates(timer.deliver_at_ms)]
        return replace(timer, wheel=self._store.find_wheel(timer, candidates) or candidates[0])


def _apply(op: Op, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> tuple[bool, object]:
    from wheels.domain import TimerwheelError

    try:
        return True, op.apply(ctx, batch, now_ms)
    except TimerwheelError as exc:
        return False, exc


def _count_due(entries: list[tuple[bytes, bytes]], now_ms: int) -> int:
    """Entries are in time order, so the due ones are a prefix."""
    for index, (key, _) in enumerate(entries):
        if keys.key_time_ms(key) > now_ms:
            return index
    return len(entries)


def _key_after(raw_key: bytes) -> TimerKey:
    """The immediate successor of a wheel key (ids never contain 0x00)."""
    return keys.decode_timer_key(raw_key + b"\x00")


def _encode_page_token(key: bytes) -> str:
    return base64.urlsafe_b64encode(key).decode()


def _decode_page_token(token: str) -> bytes | None:
    if not token:
        return None
    try:
        raw = base64.urlsafe_b64decode(token.encode())
        if len(raw) <= keys.TIME_BYTES:
            raise ValueError("too short for a wheel key")
        keys.decode_timer_key(raw)
    except (binascii.Error, ValueError, UnicodeError) as exc:
        raise InvalidArgument("page_token", token, "is not a token this server issued") from exc
    return raw
