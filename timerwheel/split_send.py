"""A SendBatch of client-chosen ids split by partition owner, on the client's side
(`timerwheel.Client.send_batch` against a cluster; docs/cluster.md, "ClusterMap and
routing"). `owner_parts`, `to_send_again` and `split_results` are the decisions, shared
with `timerwheel.AsyncClient`'s split (timerwheel/aio_routing.py).

One SendBatch call per owner the map names, made at once, each marked
`timerwheel-direct`; parts answered "not owner" or UNAVAILABLE go again once after the map
is read again. Each part is atomic on its owner, the batch as a whole is not: the answer
is every result in message order when all parts were acknowledged, otherwise the first
failing part's error (its indices those of the whole batch) saying which messages were
acknowledged, as a node's own split answers (server/forwarding.py, decision 0010).
"""

from __future__ import annotations

import functools
import time

import grpc

from timerwheel.common import SendResult
from timerwheel.retries import RetrySchedule, call_retrying, retry_after_ms
from timerwheel.routing import (
    DIRECT_METADATA,
    Router,
    RouteTable,
    in_batch,
    reroutable,
    split_summary,
)
from timerwheel.types import RemoteError, send_result
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc


def send_split(
    router: Router, service: pb_grpc.TimerServiceStub, messages: list[pb.SendRequest],
    retry: bool, timeout_s: float | None, schedule: RetrySchedule | None = None,
) -> list[SendResult]:  # fmt: skip
    """A SendBatch as one call per owner, at once (see `send_batch`); parts answered
    "not owner" or UNAVAILABLE are sent again once after the map is read again."""
    everything = list(range(len(messages)))
    answers = _send_parts(router, service, messages, everything, False, timeout_s, schedule)
    again = to_send_again(answers)
    if again:
        router.refresh()
        answers = [(ix, a) for ix, a in answers if not reroutable_answer(a)]
        answers += _send_parts(router, service, messages, again, retry, timeout_s, schedule)
    return split_results(messages, answers)


def owner_parts(
    router: RouteTable, messages: list[pb.SendRequest], indices: list[int]
) -> dict[str, list[int]]:
    """The messages at `indices` grouped by their owner's address as the map has it
    ("": no owner known, or no id: the target's part)."""
    groups: dict[str, list[int]] = {}
    for index in indices:
        groups.setdefault(router.address_of(messages[index].message_id), []).append(index)
    return groups


def to_send_again(answers: list) -> list[int]:
    """The indices of the parts answered "not owner" or UNAVAILABLE."""
    return [i for indices, answer in answers if reroutable_answer(answer) for i in indices]


def split_results(messages: list[pb.SendRequest], answers: list) -> list[SendResult]:
    """The answer of a split batch from its parts' `[(indices, response or RpcError)]`:
    every result in message order when all were acknowledged, else the first failing
    part's error (indices of the whole batch) saying which messages were acknowledged."""
    everything = range(len(messages))
    failed = [(ix, a) for ix, a in answers if isinstance(a, grpc.RpcError)]
    if failed:
        indices, error = min(failed, key=lambda part: part[0][0])
        unacked = sorted(i for ix, _ in failed for i in ix)
        acked = sorted(set(everything) - set(unacked))
        if not acked:  # nothing of the batch was acknowledged: its error as it came
            raise RemoteError.of(error)
        ids = [message.message_id for message in messages]
        details = in_batch(error.code(), error.details() or "", indices, ids)
        raise RemoteError(
            error.code(),
            f"{details} (SendBatch split by partition owner; {split_summary(unacked, acked)})",
        )
    results: list[SendResult | None] = [None] * len(messages)
    for indices, answer in answers:
        for index, result in zip(indices, answer.results, strict=True):
            results[index] = send_result(result)
    return results  # type: ignore[return-value]  # every index is filled


def _send_parts(
    router: Router, service: pb_grpc.TimerServiceStub, messages: list[pb.SendRequest],
    indices: list[int], retry: bool, timeout_s: float | None,
    schedule: RetrySchedule | None = None,
) -> list:  # fmt: skip
    """SendBatch calls for `indices`, one per owner, made at once: [(indices, the
    answer or the RpcError)]. `retry`: each part retried on UNAVAILABLE (one by one). A
    part refused without anything stored is sent again, as any send (retries.py)."""
    started = time.monotonic()
    calls = []
    for address, part_indices in owner_parts(router, messages, indices).items():
        part = pb.SendBatchRequest(messages=[messages[i] for i in part_indices])
        stub = router.stub_at(address)
        method = service.SendBatch if stub is None else stub.SendBatch
        metadata = () if stub is None else DIRECT_METADATA
        call = functools.partial(method, metadata=metadata)
        future = None if retry else method.future(part, timeout=timeout_s, metadata=metadata)
        calls.append((part_indices, call, future, part))
    answers = []
    for part_indices, call, future, part in calls:
        try:
            if future is None:
                answer = call_retrying(call, part, timeout_s, schedule, unavailable=True)
            else:
                try:
                    answer = future.result()
                except grpc.RpcError as error:
                    if retry_after_ms(error) is None:
                        raise
                    left = None if timeout_s is None else timeout_s - (time.monotonic() - started)
                    answer = call_retrying(call, part, left, unavailable=False, answered=error)
            answers.append((part_indices, answer))
        except grpc.RpcError as error:
            answers.append((part_indices, error))
    return answers


def reroutable_answer(answer: object) -> bool:
    return isinstance(answer, grpc.RpcError) and reroutable(answer)
