"""Health and the port flooded without a token, against a token-protected server.

The attack of the issue: hundreds of idle `grpc.health.v1.Health/Watch` streams with no
token. Watch used to hold a thread of the streams' pool each, so at ~300 a Subscribe got
nothing and at ~520 grpcio's `maximum_concurrent_rpcs` refused every call, health Check
included. Here 600 of them are opened over many connections, next to idle TCP
connections, header-only Sends and reflection and Subscribe calls without a token; while
they are open, callers with a token must still be served: a Subscribe gets the message
waiting for it, Send and Get answer, and health Check answers SERVING. The P99 latency
of the authenticated calls is printed, not asserted (the machine's speed varies).
"""

from __future__ import annotations

import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor, wait

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.security.limits import CallBudget
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.settings import Settings, SettingsError

WATCHES = 600  # well above both old breaking points (300 and 520)
ATTACK_CONNECTIONS = 30  # more than max_health_watches / max_health_per_peer needs
IDLE_SOCKETS = 100
STALLED_SENDS = 40  # headers sent, the request never: more than grpc_workers
CALLS = 200  # authenticated Sends and Gets timed

SERVING = health_pb2.HealthCheckResponse.SERVING
WATCH = "/grpc.health.v1.Health/Watch"
SEND = "/timerwheel.v1.TimerService/Send"


def own_channel(target: str) -> grpc.Channel:
    """A channel on a connection of its own (by default channels to one target share)."""
    return grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])


def first_answer(call) -> grpc.StatusCode | int:
    """A Watch's first status (the stream stays open), or the code it was refused with."""
    try:
        return next(call).status
    except grpc.RpcError as error:
        return error.code()


def first_answers(calls: list, readers: ThreadPoolExecutor) -> list[grpc.StatusCode | int | None]:
    """Each call's first answer, read on `readers`; None for a call that gave none within
    WAIT_S (neither admitted nor refused: left waiting, as a thread pool's queue does)."""
    futures = [readers.submit(first_answer, call) for call in calls]
    wait(futures, timeout=WAIT_S)
    return [future.result() if future.done() else None for future in futures]


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


class Stall:
    """A Send without a token whose request never comes: headers only, the body held
    back. It must be refused at once, not hold a thread waiting for the body."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.release = threading.Event()

        def never():
            self.release.wait(WAIT_S * 6)
            return
            yield  # a generator that sends nothing until released

        stream_send = channel.stream_unary(SEND)
        self.call = stream_send.future(never(), timeout=WAIT_S * 6)

    def close(self) -> None:
        self.release.set()
        self.call.cancel()


@pytest.fixture
def secured(tmp_path, make_server):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    return make_server(security=security), tokens


def test_unauthenticated_health_floods_take_nothing_from_token_holders(secured):
    server, tokens = secured
    target = server.target
    producer = TimerClient(target, timeout_s=WAIT_S, token=tokens["producer"])
    consumer = TimerClient(target, timeout_s=WAIT_S, token=tokens["consumer"])
    channels = [own_channel(target) for _ in range(ATTACK_CONNECTIONS)]
    sockets: list[socket.socket] = []
    watches, stalls = [], []
    readers = ThreadPoolExecutor(8, thread_name_prefix="watch-reader")
    try:
        waiting = producer.send("jobs.waiting", b"for the consumer", delay_ms=0)
        # The flood: idle TCP connections, stalled Sends, then the Watch streams.
        for _ in range(IDLE_SOCKETS):
            sockets.append(socket.create_connection(("127.0.0.1", server.port), timeout=WAIT_S))
        stalls = [Stall(channels[n % len(channels)]) for n in range(STALLED_SENDS)]
        request = health_pb2.HealthCheckRequest(service="")
        for n in range(WATCHES):
            watch = channels[n % len(channels)].unary_stream(
                WATCH,
                request_serializer=health_pb2.HealthCheckRequest.SerializeToString,
                response_deserializer=health_pb2.HealthCheckResponse.FromString,
            )
            watches.append(watch(request, timeout=WAIT_S * 6))
        answers = first_answers(watches, readers)
        refused = [
            call.details() for call, answer in zip(watches, answers, strict=True)
            if answer is grpc.StatusCode.RESOURCE_EXHAUSTED
        ]  # fmt: skip

        # While the admitted Watches stay open: every token holder's call is served.
        started = time.perf_counter()
        subscription = consumer.service.Subscribe(
            pb.SubscribeRequest(topic="jobs.waiting", max_in_flight=10), timeout=WAIT_S
        )
        try:
            batch = next(subscription)
        finally:
            subscription.cancel()
        subscribe_ms = (time.perf_counter() - started) * 1000
        assert [d.message_id for d in batch.deliveries] == [waiting.message_id]
        sends, gets = [], []
        for _ in range(CALLS):
            started = time.perf_counter()
            sent = producer.send("jobs.later", b"x", delay_ms=3_600_000)
            sends.append(time.perf_counter() - started)
            started = time.perf_counter()
            assert producer.get(sent.message_id).message_id == sent.message_id
            gets.append(time.perf_counter() - started)
        checks = []
        for _ in range(20):
            with own_channel(target) as probe:  # a load balancer's probe: no token
                started = time.perf_counter()
                check = health_pb2_grpc.HealthStub(probe).Check(request, timeout=WAIT_S)
                checks.append(time.perf_counter() - started)
                assert check.status == SERVING
        print(
            f"\nunder {WATCHES} unauthenticated Watch streams, {IDLE_SOCKETS} idle "
            f"connections and {STALLED_SENDS} stalled Sends: Subscribe got its waiting "
            f"message in {subscribe_ms:.1f} ms; P99 Send {p99_ms(sends):.2f} ms, "
            f"Get {p99_ms(gets):.2f} ms, health Check {p99_ms(checks):.2f} ms "
            f"({CALLS} Sends, {CALLS} Gets, {len(checks)} Checks)"
        )

        # Without a token, reflection and Subscribe are refused at once.
        with own_channel(target) as stranger:
            ask = reflection_pb2.ServerReflectionRequest(list_services="")
            for version in ("v1alpha", "v1"):  # both names reflection answers under
                reflect = stranger.stream_stream(
                    f"/grpc.reflection.{version}.ServerReflection/ServerReflectionInfo",
                    request_serializer=reflection_pb2.ServerReflectionRequest.SerializeToString,
                    response_deserializer=reflection_pb2.ServerReflectionResponse.FromString,
                )
                with pytest.raises(grpc.RpcError) as no_token:
                    list(reflect(iter([ask]), timeout=WAIT_S))
                assert no_token.value.code() is grpc.StatusCode.UNAUTHENTICATED, version
            subscribe = pb_grpc.TimerServiceStub(stranger).Subscribe
            with pytest.raises(grpc.RpcError) as no_token:
                next(subscribe(pb.SubscribeRequest(topic="jobs.waiting"), timeout=WAIT_S))
            assert no_token.value.code() is grpc.StatusCode.UNAUTHENTICATED

        # The stalled Sends were refused without their request; the Watches beyond the
        # budget were refused at once, naming the limit they would go over.
        for stall in stalls:
            assert stall.call.exception(WAIT_S).code() is grpc.StatusCode.UNAUTHENTICATED
        settings = server.settings
        admitted = answers.count(SERVING)
        assert admitted == settings.max_health_watches
        assert len(refused) == WATCHES - admitted
        # (or their pool's part of max_concurrent_rpcs, when refusals arrive faster than
        # its spare threads answer them: timerwheel.wheels.call_room)
        limits = ("max_health_watches=", "max_health_per_peer=", "max_concurrent_rpcs=")
        assert all(any(name in details for name in limits) for details in refused), refused[:3]
    finally:
        for call in watches:
            call.cancel()
        readers.shutdown(wait=True, cancel_futures=True)  # cancelled calls end their reads
        for stall in stalls:
            stall.close()
        for sock in sockets:
            sock.close()
        for channel in channels:
            channel.close()
        producer.close()
        consumer.close()

    # Ended streams give their places back: a new Watch is admitted.
    with own_channel(target) as later:
        deadline = time.monotonic() + WAIT_S
        while True:
            call = health_pb2_grpc.HealthStub(later).Watch(request, timeout=WAIT_S)
            answer = first_answer(call)
            call.cancel()
            if answer == SERVING or time.monotonic() > deadline:
                break
            threading.Event().wait(0.05)
        assert answer == SERVING


def test_a_call_budget_refuses_over_its_total_or_a_callers_share_and_frees_on_release():
    budget = CallBudget(3, "max_health_watches", 2, "max_health_per_peer")
    budget.acquire("a", "Health.Watch")
    budget.acquire("a", "Health.Watch")
    with pytest.raises(Overloaded, match=r"Health.Watch: a already holds 2 .*per_peer=2"):
        budget.acquire("a", "Health.Watch")
    budget.acquire("b", "Health.Watch")
    with pytest.raises(Overloaded, match=r"already has 3 open \(max_health_watches=3\)"):
        budget.acquire("c", "Health.Watch")
    budget.release("a")
    budget.acquire("c", "Health.Watch")
    assert budget.held == 3


def test_settings_refuse_a_global_rpc_limit_the_servers_own_threads_could_reach():
    with pytest.raises(SettingsError, match=r"max_concurrent_rpcs=300: must be above the 400"):
        Settings(max_concurrent_rpcs=300)
    with pytest.raises(SettingsError, match=r"max_health_per_peer=9"):
        Settings(max_health_per_peer=9)
    with pytest.raises(SettingsError, match=r"max_health_watches=0"):
        Settings(max_health_watches=0)
