"""A worker's concurrent sends, carried to the engine process together, in turns.

Each gRPC thread of a worker holds one request's prepared sends (a `SendOp`). Carried one
call each, every unary Send costs the engine process a connection thread's wake-up, an
unpickle, a hand-off to the writer and an answer: far more of the engine's CPU than the
send itself, and the engine process is the serial part of the server. The funnel does
for these calls what the writer's group commit does for RocksDB writes:

1. A thread with an op queues it. If no turn is under way, it leads one.
2. The leader takes every op queued so far and carries them in one call
   (`carry(ops)`, the engine's `submit_sends_many`), then hands each op's answer to the
   thread that queued it.
3. Ops queued while a turn was under way wait for the next one, which the first of them
   leads. So there is at most one call in flight per worker, and the busier the worker,
   the more ops share a call; a lone Send goes at once, as before.

The ops stay separate on the way: each is its own atomic unit with its own answer (a
SendBatch all-or-nothing, a unary Send alone), so a refused op never fails another that
shared its call. A call that fails as a whole (the engine process gone: `PeerUnavailable`)
fails every op it carried, each thread raising an instance of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from timerwheel.common import SendResult
from timerwheel.engine.send_op import SendOp
from timerwheel.procs.ipc import PackedError, RemoteFailure, pack_error, unpack_error

# One op's answer: (True, its results as `SendOp.packed_results` packs them) or
# (False, its error, packed to cross a process).
Answer = tuple[bool, "list[SendResult] | PackedError | None"]
Carry = Callable[[list[SendOp]], list[Answer]]


class _Waiter:
    """One queued op and the thread waiting for its answer."""

    __slots__ = ("answer", "op", "woken")

    def __init__(self, op: SendOp) -> None:
        self.op = op
        self.answer: Answer | None = None  # None when woken: lead the next turn
        self.woken = threading.Event()


class SendFunnel:
    def __init__(self, carry: Carry) -> None:
        self._carry = carry
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._turn_under_way = False

    def submit(self, op: SendOp) -> list[SendResult]:
        """The op's results once the engine has committed it; its error otherwise."""
        waiter = _Waiter(op)
        with self._lock:
            self._queue.append(waiter)
            lead = not self._turn_under_way
            self._turn_under_way = True
        if not lead:
            waiter.woken.wait()
        if waiter.answer is None:  # first in line: this thread leads the turn
            self._lead_turn()
        ok, value = waiter.answer
        if ok:
            return op.unpacked_results(value)
        raise unpack_error(value)

    def _lead_turn(self) -> None:
        with self._lock:
            turn, self._queue = self._queue, []
        try:
            answers = self._carry([waiter.op for waiter in turn])
            if len(answers) != len(turn):
                raise RemoteFailure(f"{len(answers)} answers to {len(turn)} ops")
        except Exception as exc:  # the call failed as a whole: so did every op in it
            answers = [(False, pack_error(exc))] * len(turn)
        for waiter, answer in zip(turn, answers, strict=True):  # lengths checked above
            waiter.answer = answer
        with self._lock:
            next_leader = self._queue[0] if self._queue else None
            self._turn_under_way = next_leader is not None
        for waiter in turn:
            waiter.woken.set()
        if next_leader is not None:
            next_leader.woken.set()
