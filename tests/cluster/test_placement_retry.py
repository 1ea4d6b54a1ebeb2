"""A replicated stream or bucket refused for placement (a peer the meta leader calls offline
for a moment) is made again, not taken for "it exists" (cluster/nats_io.py `placed`); a key
a bucket has just said exists is read again until a replica returns it (`read_landed`)."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import errors as js_errors

from timerwheel.cluster.nats_io import NO_PLACEMENT, placed, read_landed


def _refusals(codes: list[int]):
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) <= len(codes):
            raise js_errors.BadRequestError(code=400, err_code=codes[len(calls) - 1])
        return "made"

    return attempt, calls


def test_a_refused_placement_is_tried_again_until_it_is_made():
    attempt, calls = _refusals([NO_PLACEMENT, NO_PLACEMENT])
    assert asyncio.run(placed(attempt)) == "made"
    assert len(calls) == 3


def test_another_refusal_is_raised_at_once():
    attempt, calls = _refusals([10058])  # a stream of that name with another config
    with pytest.raises(js_errors.BadRequestError):
        asyncio.run(placed(attempt))
    assert len(calls) == 1


def test_a_placement_refused_past_the_bound_is_raised():
    attempt, calls = _refusals([NO_PLACEMENT] * 1000)
    with pytest.raises(js_errors.BadRequestError):
        asyncio.run(placed(attempt, bound_s=0.3))
    assert 1 < len(calls) < 1000


class _Entry:
    def __init__(self, value: bytes) -> None:
        self.value = value


class _LaggingBucket:
    """Answers "not found" for the first `misses` gets (a replica that has not yet applied
    the create another node's refused create ran into)."""

    def __init__(self, misses: int) -> None:
        self.misses = misses
        self.gets = 0

    async def get(self, key: str) -> _Entry:
        self.gets += 1
        if self.gets <= self.misses:
            raise js_errors.KeyNotFoundError()
        return _Entry(b'{"partitions": 8}')


def test_a_key_a_replica_has_not_yet_applied_is_read_again_until_returned():
    bucket = _LaggingBucket(misses=3)
    assert asyncio.run(read_landed(bucket, "cluster")) == b'{"partitions": 8}'  # type: ignore[arg-type]
    assert bucket.gets == 4


def test_a_key_never_returned_is_an_error_naming_it_after_the_bound():
    bucket = _LaggingBucket(misses=10**6)
    with pytest.raises(LookupError, match="'cluster'"):
        asyncio.run(read_landed(bucket, "cluster", bound_s=0.2))  # type: ignore[arg-type]
    assert 1 < bucket.gets < 10**6
