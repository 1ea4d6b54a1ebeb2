"""Writer operations: each is applied inside one group commit by the writer thread.

An operation checks everything before it stages anything, so a rejected operation
leaves the batch untouched; its future is completed only after the batch is durable.
The operations: `SendOp` (timerwheel.engine.send_op), `CancelOp` and `AckOp` (here), the moves and
dead letters (timerwheel.engine.move_ops), delivery trace events (timerwheel.engine.trace_ops).
"""

from __future__ import annotations

from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from typing import ClassVar

from timerwheel.common import State
from timerwheel.store import records
from timerwheel.store.batch import StagedBatch
from timerwheel.store.timer_store import TimerStore
from timerwheel.wheels.domain import FailedPrecondition, NotFound
from timerwheel.wheels.scheduler import Scheduler


@dataclass
class WriterContext:
    store: TimerStore
    scheduler: Scheduler
    retention_ms: int


@dataclass
class Op:
    future: Future = field(default_factory=Future, init=False)
    # A caller is answered when the op's group commit returns, so that commit fsyncs the
    # WAL first. An op nobody waits on (delivery trace events) sets this False: a group
    # of only such ops, fires and cascades is written without an fsync (Writer.iterate).
    durable: ClassVar[bool] = True
    # 0: the writer wakes for the op at once. Above 0 (delivery trace events): nobody
    # waits on it, so it rides along with the writer's next group commit, made for a fire
    # or another op, or at most this long after it was queued (Writer.submit).
    linger_ms: ClassVar[int] = 0
    # True for what adds work (sends): refused past the writer's queue budget. What
    # settles work (acks, cancels, nacks, trace events) is always queued: refusing an Ack
    # under overload would only bring its message back as a redelivery, more work.
    sheddable: ClassVar[bool] = False

    @property
    def weight(self) -> int:
        return 1

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> object:
        raise NotImplementedError

    def reads(self) -> list[bytes]:
        """Ids whose stored records `apply` will read (prefetched for the whole group)."""
        return []

    # An operation crosses from a worker process to the engine's (timerwheel.procs.engine_host)
    # without its future: the receiving side waits on a fresh one.
    def __getstate__(self) -> dict:
        return {name: value for name, value in self.__dict__.items() if name != "future"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self.future = Future()


def unschedule(ctx: WriterContext, batch: StagedBatch, message_id: str, raw: bytes) -> None:
    """Take a SCHEDULED timer's key out of whichever wheel holds it."""
    candidates = ctx.scheduler.wheel_candidates(records.record_deliver_at_ms(raw))
    ctx.store.stage_unschedule(batch, message_id, raw, [w.name for w in candidates])


@dataclass
class CancelOp(Op):
    message_id: str = ""

    def reads(self) -> list[bytes]:
        return [self.message_id.encode()]

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> State:
        raw = ctx.store.lookup(batch, self.message_id.encode())
        if raw is None:
            raise NotFound(f"message_id={self.message_id!r}: no such timer")
        state = records.record_state(raw)
        if state is State.CANCELLED:
            return state  # cancelling twice is not an error
        if state is not State.SCHEDULED:
            timer = records.decode_timer(self.message_id, raw)
            raise FailedPrecondition(
                f"message_id={self.message_id!r}: already {state.name} "
                f"(fired_at_ms={timer.fired_at_ms}); a fired timer cannot be cancelled"
            )
        candidates = ctx.scheduler.wheel_candidates(records.record_deliver_at_ms(raw))
        ctx.store.stage_cancel(
            batch, self.message_id, raw, [w.name for w in candidates],
            now_ms, now_ms + ctx.retention_ms,
        )  # fmt: skip
        return State.CANCELLED


@dataclass
class AckOp(Op):
    topic: str = ""
    message_ids: list[str] = field(default_factory=list)
    # Beside each id, the first delivery the delivery side held for this Ack
    # (timerwheel.delivery.first_deliveries) as a record trailer (b"": none), or None for no id.
    first_deliveries: list[bytes] | None = None

    @property
    def weight(self) -> int:
        return len(self.message_ids)

    def reads(self) -> list[bytes]:
        return list(map(str.encode, self.message_ids))

    def apply(self, ctx: WriterContext, batch: StagedBatch, now_ms: int) -> list[str]:
        """Ack what is FIRED on this topic; unknown, repeated or already acked ids are skipped.

        One read for the whole group (`reads`): acks arrive in batches, and a point get
        per id (holding the GIL) was the writer's bottleneck under load.
        """
        unique = list(dict.fromkeys(self.message_ids))
        expire_at_ms = now_ms + ctx.retention_ms
        trailers = None
        if self.first_deliveries:
            by_id = dict(zip(self.message_ids, self.first_deliveries, strict=True))
            trailers = partial(_trailers, by_id)
        return ctx.store.stage_acks(batch, self.topic, unique, now_ms, expire_at_ms, trailers)


def _trailers(by_id: dict[str, bytes], message_ids: list[str]) -> list[bytes]:
    """The first-delivery trailer of each acked id, in C (b"": none)."""
    return list(map(by_id.get, message_ids, repeat(b"")))
