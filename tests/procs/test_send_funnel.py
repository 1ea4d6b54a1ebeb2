"""timerwheel.procs.send_funnel: concurrent ops carried together, in turns, each answered alone.

The carry is the test's own: it records what each turn carried and blocks until the test
lets it go, so what shares a turn is decided by the test, not by thread timing. (Over a
real socket to a real engine: tests/procs/test_engine_host.py.)
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from timerwheel.common import SendResult
from timerwheel.engine.send_op import SendOp
from timerwheel.procs.ipc import PeerUnavailable, RemoteFailure, pack_error
from timerwheel.procs.send_funnel import SendFunnel
from timerwheel.wheels.domain import AlreadyExists

WAIT_S = 10


class GatedCarry:
    """Answers each op with one SendResult named after it, once the test opens the gate."""

    def __init__(self) -> None:
        self.turns: list[list[str]] = []
        self.entered = threading.Semaphore(0)
        self.gate = threading.Semaphore(0)
        self.refuse: set[str] = set()
        self.fail_whole_call: Exception | None = None
        self.drop_an_answer = False

    def __call__(self, ops: list[SendOp]) -> list:
        names = [op.message_ids[0] for op in ops]
        self.turns.append(names)
        self.entered.release()
        assert self.gate.acquire(timeout=WAIT_S)
        if self.fail_whole_call is not None:
            raise self.fail_whole_call
        answers = [
            (False, pack_error(AlreadyExists(f"message_id={name!r} is taken")))
            if name in self.refuse
            else (True, [SendResult(name, 1_000)])
            for name in names
        ]
        return answers[1:] if self.drop_an_answer else answers


def op(name: str) -> SendOp:
    return SendOp(message_ids=[name], deliver_times_ms=[1_000])


def wait_queued(funnel: SendFunnel, count: int) -> None:
    """Until `count` ops wait for the next turn (they queue before they block)."""
    deadline = time.monotonic() + WAIT_S
    while len(funnel._queue) < count:
        assert time.monotonic() < deadline, f"{len(funnel._queue)} of {count} queued"
        time.sleep(0.001)


@pytest.fixture
def pool():
    with ThreadPoolExecutor(max_workers=8) as executor:
        yield executor


def test_a_lone_op_is_carried_at_once_alone():
    carry = GatedCarry()
    funnel = SendFunnel(carry)
    carry.gate.release()
    assert funnel.submit(op("a")) == [SendResult("a", 1_000)]
    assert carry.turns == [["a"]]


def test_ops_that_arrive_during_a_turn_share_the_next_one_and_each_gets_its_own_answer(pool):
    carry = GatedCarry()
    funnel = SendFunnel(carry)
    first = pool.submit(funnel.submit, op("a"))
    assert carry.entered.acquire(timeout=WAIT_S)  # turn 1 under way, carrying only "a"
    later = {name: pool.submit(funnel.submit, op(name)) for name in ("b", "c", "d")}
    wait_queued(funnel, 3)
    carry.gate.release()  # turn 1 ends; "b", "c", "d" go in turn 2, led by the first of them
    assert carry.entered.acquire(timeout=WAIT_S)
    carry.gate.release()
    assert first.result(WAIT_S) == [SendResult("a", 1_000)]
    for name, future in later.items():
        assert future.result(WAIT_S) == [SendResult(name, 1_000)]
    assert carry.turns[0] == ["a"]
    assert sorted(carry.turns[1]) == ["b", "c", "d"]
    assert len(carry.turns) == 2


def test_a_refused_op_fails_alone_and_its_turn_mates_are_answered(pool):
    carry = GatedCarry()
    carry.refuse = {"c"}
    funnel = SendFunnel(carry)
    first = pool.submit(funnel.submit, op("a"))
    assert carry.entered.acquire(timeout=WAIT_S)
    later = {name: pool.submit(funnel.submit, op(name)) for name in ("b", "c", "d")}
    wait_queued(funnel, 3)
    carry.gate.release(2)
    with pytest.raises(AlreadyExists, match="message_id='c' is taken"):
        later["c"].result(WAIT_S)
    assert later["b"].result(WAIT_S) == [SendResult("b", 1_000)]
    assert later["d"].result(WAIT_S) == [SendResult("d", 1_000)]
    assert first.result(WAIT_S) == [SendResult("a", 1_000)]


def test_a_call_that_fails_as_a_whole_fails_each_op_with_an_error_of_its_own(pool):
    carry = GatedCarry()
    funnel = SendFunnel(carry)
    first = pool.submit(funnel.submit, op("a"))
    assert carry.entered.acquire(timeout=WAIT_S)
    later = [pool.submit(funnel.submit, op(name)) for name in ("b", "c")]
    wait_queued(funnel, 2)
    carry.fail_whole_call = PeerUnavailable("the engine process is not available")
    carry.gate.release(2)
    errors = [future.exception(WAIT_S) for future in (first, *later)]
    assert all(isinstance(error, PeerUnavailable) for error in errors)
    assert "engine process is not available" in str(errors[1])
    assert len({id(error) for error in errors}) == 3  # raised in three threads


def test_a_wrong_number_of_answers_fails_the_turn_instead_of_leaving_a_caller_waiting(pool):
    carry = GatedCarry()
    carry.drop_an_answer = True
    funnel = SendFunnel(carry)
    carry.gate.release()
    with pytest.raises(RemoteFailure, match="0 answers to 1 ops"):
        funnel.submit(op("a"))
    carry.drop_an_answer = False
    carry.gate.release()  # the funnel is free again: the next op leads its own turn
    assert funnel.submit(op("b")) == [SendResult("b", 1_000)]
