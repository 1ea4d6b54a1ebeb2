"""SendRequest.retry into the domain's RetryPolicy: unset growth and cap take the
defaults, a fixed policy needs only its wait, an unknown kind is refused by name, and a
send with only a policy still counts as one with options."""

from __future__ import annotations

import pytest

from timerwheel.server.send_requests import spec_from_proto
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import InvalidArgument
from timerwheel.wheels.retry import RetryKind, RetryPolicy


def spec(**retry: object):
    return spec_from_proto(pb.SendRequest(topic="t", delay_ms=0, retry=pb.RetryPolicy(**retry)))


def test_only_initial_ms_takes_the_default_growth_and_cap():
    assert spec(initial_ms=500).options.retry == RetryPolicy(
        RetryKind.EXPONENTIAL, 500, 300_000, 2.0, 0
    )


def test_a_fixed_policy_needs_only_its_wait():
    assert spec(kind=pb.RETRY_FIXED, initial_ms=250, jitter_percent=10).options.retry == (
        RetryPolicy(RetryKind.FIXED, 250, 250, 1.0, 10)
    )


def test_an_unknown_kind_is_refused_by_name():
    with pytest.raises(InvalidArgument, match=r"retry\.kind=7"):
        spec(kind=7, initial_ms=1)


def test_without_retry_a_plain_send_has_no_options():
    assert spec_from_proto(pb.SendRequest(topic="t", delay_ms=0)).options is None
