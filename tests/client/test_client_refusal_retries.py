"""The clients' decision on a refusal that stored nothing (timerwheel/retries.py,
`Retrying`): pure, in given times. Over real gRPC, against a server whose admission gate
is closed: tests/server/test_service_admission_retry.py."""

from __future__ import annotations

import grpc
import pytest

from timerwheel.retries import (
    REFUSED_BUDGET_S,
    REFUSED_MAX_WAIT_MS,
    REFUSED_MIN_WAIT_MS,
    RETRY_AFTER_KEY,
    Retrying,
    call_retrying,
    refused_wait_s,
    retry_after_ms,
)
from timerwheel.types import RemoteError

EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED
UNAVAILABLE = grpc.StatusCode.UNAVAILABLE


class Answer(grpc.RpcError):
    """An RpcError as a unary call raises it: a code and trailing metadata."""

    def __init__(self, code: grpc.StatusCode, trailers=(), details: str = "refused") -> None:
        self._code = code
        self._trailers = tuple(trailers)
        self._details = details

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self):
        return self._trailers


def refused(after: str = "20") -> Answer:
    return Answer(EXHAUSTED, [("other", "x"), (RETRY_AFTER_KEY, after)])


def test_only_resource_exhausted_with_the_marker_asks_for_a_retry():
    assert retry_after_ms(refused("20")) == 20
    assert retry_after_ms(Answer(EXHAUSTED)) is None  # a full disk, a too large message, ...
    assert retry_after_ms(Answer(UNAVAILABLE, [(RETRY_AFTER_KEY, "20")])) is None
    assert retry_after_ms(refused("soon")) is None  # not a figure: not a promise either
    assert retry_after_ms(refused("-5")) == 0


def test_the_wait_starts_at_the_servers_figure_doubles_and_is_capped():
    assert refused_wait_s(20, 1, 1.0) == pytest.approx(0.020)
    assert refused_wait_s(20, 2, 1.0) == pytest.approx(0.040)
    assert refused_wait_s(20, 3, 1.0) == pytest.approx(0.080)
    assert refused_wait_s(20, 50, 1.0) == pytest.approx(REFUSED_MAX_WAIT_MS / 1000)
    assert refused_wait_s(1, 1, 1.0) == pytest.approx(REFUSED_MIN_WAIT_MS / 1000)
    assert refused_wait_s(60_000, 1, 1.0) == pytest.approx(REFUSED_MAX_WAIT_MS / 1000)
    assert refused_wait_s(20, 1, 1.2) == pytest.approx(0.024)  # jitter scales it


def test_a_refusal_is_retried_until_the_deadline_whether_the_send_is_idempotent_or_not():
    retrying = Retrying(100.0, timeout_s=1.0, unavailable=False)
    now, waits = 100.0, []
    while (wait := retrying.wait_s(EXHAUSTED, 20, now)) is not None:
        waits.append(wait)
        now += wait
    assert waits == pytest.approx([0.02, 0.04, 0.08, 0.16, 0.32])  # 0.64 more would pass 101
    assert retrying.refused == 6
    assert retrying.left_s(100.5) == pytest.approx(0.5)


def test_other_answers_are_not_retried_and_unavailable_only_when_asked():
    not_idempotent = Retrying(0.0, timeout_s=30.0, unavailable=False)
    assert not_idempotent.wait_s(EXHAUSTED, None, 0.0) is None  # no marker: raised
    assert not_idempotent.wait_s(UNAVAILABLE, None, 0.0) is None
    assert not_idempotent.wait_s(grpc.StatusCode.INVALID_ARGUMENT, None, 0.0) is None
    idempotent = Retrying(0.0, timeout_s=30.0, unavailable=True)
    assert idempotent.wait_s(UNAVAILABLE, None, 0.0) is not None
    # each on its own schedule: refusals do not use up the UNAVAILABLE attempts
    for _ in range(10):
        assert idempotent.wait_s(EXHAUSTED, 20, 0.0) is not None
    assert idempotent.wait_s(UNAVAILABLE, None, 0.0) is not None


def test_without_a_deadline_refusals_stop_after_the_budget():
    retrying = Retrying(0.0, timeout_s=None, unavailable=False)
    assert retrying.left_s(1e6) is None
    assert retrying.wait_s(EXHAUSTED, 20, REFUSED_BUDGET_S - 1.0) is not None
    assert retrying.wait_s(EXHAUSTED, 20, REFUSED_BUDGET_S) is None


def test_call_retrying_sends_the_same_request_again_and_raises_the_last_refusal():
    seen = []

    def refusing_twice(request, timeout):
        seen.append((request, timeout))
        if len(seen) <= 2:
            raise refused("1")
        return "stored"

    assert call_retrying(refusing_twice, "req", 30.0, unavailable=False) == "stored"
    assert [r for r, _ in seen] == ["req"] * 3
    assert all(0 < timeout <= 30.0 for _, timeout in seen)

    last = refused("1")

    def always(request, timeout):
        raise last

    with pytest.raises(grpc.RpcError) as raised:
        call_retrying(always, "req", 0.05, unavailable=False)
    assert raised.value is last


def test_the_remote_error_says_the_wait_only_for_the_marked_refusal():
    assert RemoteError.of(refused("20")).retry_after_ms == 20
    assert RemoteError.of(Answer(EXHAUSTED)).retry_after_ms is None
