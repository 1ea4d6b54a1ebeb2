"""A replicated stream or bucket refused for placement (a peer the meta leader calls offline
for a moment) is made again, not taken for "it exists" (cluster/nats_io.py `placed`)."""

from __future__ import annotations

import asyncio

import pytest
from nats.js import errors as js_errors

from timerwheel.cluster.nats_io import NO_PLACEMENT, placed


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
