"""`timerwheel_refusals_total{method}` names a call by its RPC's short name (`Get`, `Send`),
whichever layer refused it: the request guard (no token, a role without the method, a
request that does not decode) or the servicer (timerwheel.server.errors). The guard named
it `TimerService.Send` once, so one refused call was counted under two names by layer.
The caller-queue cap's refusals (timerwheel.security.fair_pool) are asserted by
tests/security/test_caller_queue_cap.py."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.credentials import write_tokens
from helpers.metrics_scenario import scrape, value
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.security.settings import SecuritySettings

SERVICE = "timerwheel.v1.TimerService"
UNKNOWN_ID = "0" * 26


def refusals(samples, method: str, code: str) -> float:
    return value(samples, "timerwheel_refusals_total", method=method, code=code)


def test_guard_and_servicer_refusals_carry_the_same_short_method_label(tmp_path, make_server):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, metrics_port=0)
    port = server.metrics.port
    before = scrape(port)
    with TimerClient(server.target, timeout_s=WAIT_S) as anonymous:  # the guard: no token
        assert status_of(lambda: anonymous.get(UNKNOWN_ID)).code is grpc.StatusCode.UNAUTHENTICATED
    with TimerClient(server.target, timeout_s=WAIT_S, token=tokens["consumer"]) as consumer:
        # the guard again: a consumer may not Send
        denied = status_of(lambda: consumer.send("jobs", b"x", delay_ms=0)).code
        assert denied is grpc.StatusCode.PERMISSION_DENIED
        # the servicer: a Get the guard lets through, of an id nobody sent
        assert status_of(lambda: consumer.get(UNKNOWN_ID)).code is grpc.StatusCode.NOT_FOUND
    metadata = (("authorization", f"Bearer {tokens['producer']}"),)
    with grpc.insecure_channel(server.target) as channel:  # the guard: does not decode
        with pytest.raises(grpc.RpcError) as undecodable:
            channel.unary_unary(f"/{SERVICE}/Send")(
                b"\x0a\x02\xff\xfe", timeout=WAIT_S, metadata=metadata
            )  # topic: not UTF-8
        assert undecodable.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    after = scrape(port)

    def moved(method: str, code: str) -> float:
        return refusals(after, method, code) - refusals(before, method, code)

    assert moved("Get", "UNAUTHENTICATED") == 1
    assert moved("Send", "PERMISSION_DENIED") == 1
    assert moved("Get", "NOT_FOUND") == 1
    assert moved("Send", "INVALID_ARGUMENT") == 1
    methods = {
        dict(labels)["method"] for (name, labels) in after if name == "timerwheel_refusals_total"
    }
    assert methods and all("." not in method for method in methods), methods
