"""The bound on reading a request (timerwheel.security.read_timeout,
`request_read_timeout_ms`).

A call whose client sends its headers and never its request used to hold its thread and
its place of the receive gate until its deadline, and, sent without one, until its
connection closed: two tenants stalling calls so held every unary thread and every place,
and a third tenant's Send waited until its own deadline. Now a read not done within the
bound cancels its call, and the thread and the place come free.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers.credentials import producer_tokens
from helpers.waits import WAIT_S, until

from timerwheel.security.read_timeout import ReadTimer, next_request
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from timerwheel.wheels.settings import Settings, SettingsError

SEND = "/timerwheel.v1.TimerService/Send"
CHECK = "/grpc.health.v1.Health/Check"
READ_TIMEOUT_MS = 500  # short, so that a stalled call is cut soon


def own_channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])


def bearer(token: str | None):
    return (("authorization", f"Bearer {token}"),) if token else None


def test_a_read_not_ended_in_time_is_cancelled_and_one_ended_is_not():
    timer = ReadTimer(50)
    cancelled: list[str] = []
    second = threading.Event()
    first = timer.start(lambda: cancelled.append("first"))
    assert timer.end(first) is False  # ended in time: never cancelled
    timer.start(lambda: (cancelled.append("second"), second.set()))
    assert second.wait(WAIT_S)
    # Reads expire in the order they started: the first's deadline passed before the
    # second's, and it was not cancelled.
    assert cancelled == ["second"] and timer.timing == 0
    third = timer.start(lambda: cancelled.append("third"))
    until(lambda: "third" in cancelled, "a read started after an idle spell is timed too")
    assert timer.end(third) is True  # expired: its reader is told


def test_the_read_timeout_is_a_validated_setting():
    assert Settings().request_read_timeout_ms == 10_000
    for bad in (0, -1, 2.5):
        with pytest.raises(SettingsError, match=f"request_read_timeout_ms={bad!r}"):
            Settings(request_read_timeout_ms=bad)
    with pytest.raises(ValueError, match="request_read_timeout_ms=0"):
        ReadTimer(0)


def test_a_cancelled_read_frees_its_thread_and_its_client_gets_cancelled():
    """What the bound relies on in grpcio, public API only: a request-streaming handler
    runs before its request comes, and `ServicerContext.cancel()` from another thread ends
    the call and the handler's wait in `next()`. If grpcio stopped doing either, the
    handler below would wait until the client's deadline and this would fail."""
    timer = ReadTimer(200)
    ended: list[str] = []

    def handler(requests, context):
        try:
            next_request(requests, context, timer, "Test.Read", None)
        finally:
            ended.append(threading.current_thread().name)
        return b""

    server = grpc.server(ThreadPoolExecutor(2, thread_name_prefix="read-test"))
    method = grpc.stream_unary_rpc_method_handler(handler)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("t", {"M": method}),))
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    release = threading.Event()

    def never():
        release.wait(WAIT_S * 3)
        return
        yield

    try:
        with own_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_unary("/t/M").future(never(), timeout=WAIT_S * 3)
            with pytest.raises(grpc.RpcError):
                call.result(WAIT_S)  # cut at 0.2 s, long before its deadline
            assert call.code() is grpc.StatusCode.CANCELLED
        until(lambda: ended, "the handler's thread is free once its read is cut")
        assert ended[0].startswith("read-test") and timer.timing == 0
    finally:
        release.set()
        server.stop(0).wait(WAIT_S)


class Stalls:
    """`count` calls of `method` whose request never comes, sent without a deadline on a
    connection of their own; each that ends is opened again at once, so the stall holds
    its threads and places for as long as it runs. Counts how its calls ended."""

    def __init__(self, target: str, method: str, token: str | None, count: int) -> None:
        self.channel = own_channel(target)
        self.method = method
        self.metadata = bearer(token)
        self.codes: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.closing = threading.Event()
        self.calls = [self._open() for _ in range(count)]

    def _open(self) -> grpc.Future:
        def never():
            self.closing.wait(WAIT_S * 6)  # sends nothing while the test runs
            return
            yield

        call = self.channel.stream_unary(self.method).future(never(), metadata=self.metadata)
        call.add_done_callback(self._ended)
        return call

    def _ended(self, call: grpc.Future) -> None:
        if self.closing.is_set():
            return  # ended by the test's end, not by the server
        with self.lock:
            self.codes[call.code().name] += 1
        self._open()

    def cancelled(self) -> int:
        with self.lock:
            return self.codes["CANCELLED"]

    def close(self) -> None:
        self.closing.set()
        self.channel.close()  # ends every call still open


def test_two_tenants_stalling_every_thread_leave_a_third_tenants_calls_served(
    make_server, tmp_path
):
    """Four unary threads, three a caller; a receive gate of four places, three a caller.
    Tokens a and b keep 8 Sends each open whose request never comes, without a deadline:
    more than all the threads and all the places. A read cut after 0.5 s frees a thread
    and a place, which the pool and the gate give in turns: token c's Sends and Gets are
    all served. Without the bound they waited until their own deadline (a and b's calls
    were never cut)."""
    secret = producer_tokens(tmp_path / "tokens.toml", ["a", "b", "c"])
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(
        security=security, grpc_workers=4, caller_thread_share_percent=75,
        request_read_timeout_ms=READ_TIMEOUT_MS,
    )  # fmt: skip
    stalls = [Stalls(server.target, SEND, secret[name], 8) for name in ("a", "b")]
    channel = own_channel(server.target)
    stub = pb_grpc.TimerServiceStub(channel)
    outcomes: list[str] = []
    lock = threading.Lock()

    def tenant_c(thread: int) -> None:
        for i in range(3):
            message_id = f"c-{thread}-{i}"
            send = pb.SendRequest(topic="jobs", body=b"x", delay_ms=3_600_000,
                                  message_id=message_id)  # fmt: skip
            get = pb.GetRequest(message_id=message_id)
            for call, request in ((stub.Send, send), (stub.Get, get)):
                try:
                    call(request, metadata=bearer(secret["c"]), timeout=WAIT_S)
                    outcome = "OK"
                except grpc.RpcError as error:
                    outcome = f"{error.code().name}: {error.details()}"
                with lock:
                    outcomes.append(outcome)

    try:
        until(lambda: all(stall.cancelled() for stall in stalls),
              "each stalling tenant holds its places until the bound cuts a call")  # fmt: skip
        cut_before = [stall.cancelled() for stall in stalls]
        threads = [threading.Thread(target=tenant_c, args=(t,)) for t in range(2)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S * 12)
        cut_during = [s.cancelled() - cut for s, cut in zip(stalls, cut_before, strict=True)]
    finally:
        for stall in stalls:
            stall.close()
        channel.close()

    print(
        f"\nstalled by tokens a and b (8 Sends each, no deadline): token c "
        f"{outcomes.count('OK')}/{len(outcomes)} served; stalled calls cut while it ran: "
        f"{cut_during}; a {dict(stalls[0].codes)}, b {dict(stalls[1].codes)}"
    )
    failed = [outcome for outcome in outcomes if outcome != "OK"]
    assert len(outcomes) == 12 and not failed, failed[:3]
    assert all(cut_during), cut_during  # the stall went on, and was cut, throughout
    for stall in stalls:  # every stalled call that ended was cut by the bound
        assert set(stall.codes) == {"CANCELLED"}, stall.codes


def test_stalled_health_checks_leave_the_probes_reads_to_a_load_balancer(make_server):
    """Health reads its requests four at once, one a connection. Four connections without
    a token each keep a Check open whose request never comes: every place to read. A read
    cut after 0.5 s frees its place, and a load balancer's Checks (within the budget of
    eight) are all answered SERVING. Without the bound they waited until their deadline."""
    server = make_server(
        max_health_checks=8, max_health_per_peer=1, request_read_timeout_ms=READ_TIMEOUT_MS
    )
    stalls = [Stalls(server.target, CHECK, None, 1) for _ in range(4)]
    answers: list[str] = []
    try:
        until(lambda: all(stall.cancelled() for stall in stalls),
              "each stalled Check holds its place until the bound cuts it")  # fmt: skip
        with own_channel(server.target) as probe:
            health = health_pb2_grpc.HealthStub(probe)
            for _ in range(4):
                try:
                    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT_S)
                    answers.append(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
                except grpc.RpcError as error:
                    answers.append(f"{error.code().name}: {error.details()}")
    finally:
        for stall in stalls:
            stall.close()
    assert answers == ["SERVING"] * 4, answers
