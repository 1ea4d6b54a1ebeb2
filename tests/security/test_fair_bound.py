"""grpcio's global limit on calls, shared between the server's pools and, in each, fairly
between callers (timerwheel.wheels.call_room; timerwheel.security.fair_pool `capacity`).

grpcio counts every call handed to a pool and not yet ended, and past its
`maximum_concurrent_rpcs` refuses every new call, "Concurrent RPC limit exceeded!". Each
caller's waiting calls were capped (`max_queued_calls_per_caller`), their sum was not:
four tokens (or four connections without tokens) keeping stalled Sends open filled it,
and every other tenant's call, health Check included, was refused. Now the pools refuse
first, each within its part, and a full pool sheds a call of the caller holding the most:
a caller with few calls in flight is admitted whoever floods.
"""

from __future__ import annotations

import threading
import time
from collections import Counter

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from helpers.credentials import producer_tokens
from helpers.waits import WAIT_S, until

from timerwheel.security.fair_pool import FairPool
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.v1 import timerwheel_pb2_grpc as pb_grpc
from timerwheel.wheels.call_room import call_room
from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.settings import Settings, SettingsError

SEND = "/timerwheel.v1.TimerService/Send"
GRPCIO_REFUSAL = "Concurrent RPC limit exceeded!"


def by_first_arg(_fn, args) -> str:
    return args[0]


def test_a_full_pool_sheds_the_newest_waiting_call_of_the_caller_holding_most():
    pool = FairPool(workers=2, per_key=1, thread_name_prefix="t", key_of=by_first_arg,
                    capacity=6)  # fmt: skip
    release = threading.Event()
    started = threading.Semaphore(0)

    def task(_key: str, name: str) -> str:
        started.release()
        assert release.wait(WAIT_S)
        return name

    def refusal(future) -> str:
        with pytest.raises(Overloaded) as caught:
            future.result(0)  # answered at once, never queued
        return str(caught.value)

    try:
        a = [pool.submit(task, "a", f"a{i}") for i in range(5)]  # 1 running, 4 waiting
        b = pool.submit(task, "b", "b0")  # on the second thread
        for _ in range(2):
            assert started.acquire(timeout=WAIT_S)
        assert pool.total == 6 and pool.held("a") == 5 and pool.held("b") == 1
        c0 = pool.submit(task, "carol", "c0")  # full: a's newest waiting call gives way
        shed = refusal(a[4])
        assert shed.startswith("a has 5 calls in the t pool, which is full (6 calls)"), shed
        assert "the most of any caller" in shed and "retry later" in shed
        assert "carol" not in shed  # the other caller is not named
        c1 = pool.submit(task, "carol", "c1")  # c would hold 2, a holds 4: a gives way again
        refusal(a[3])
        assert (pool.held("a"), pool.held("carol"), pool.total) == (3, 2, 6)
        late = refusal(pool.submit(task, "carol", "c2"))  # would hold 3, a holds 3: refused
        assert late.startswith("carol already has 2 calls in the t pool, which is full"), late
        assert "no caller with calls waiting has more" in late
        refusal(pool.submit(task, "a", "a5"))  # a holds the most: its own call is refused
        # b holds one running call and nothing waiting: never asked to give way
        assert pool.held("b") == 1 and pool.total == 6
        release.set()
        assert [f.result(WAIT_S) for f in a[:3]] == ["a0", "a1", "a2"]
        assert [f.result(WAIT_S) for f in (b, c0, c1)] == ["b0", "c0", "c1"]
        until(lambda: pool.total == 0, "every call ended gives its place back")
        assert pool.submit(task, "a", "again").result(WAIT_S) == "again"
    finally:
        release.set()
        pool.shutdown()


def test_a_refusal_marked_at_once_is_answered_where_submitted_and_takes_no_place():
    pool = FairPool(workers=1, per_key=1, thread_name_prefix="t", key_of=by_first_arg,
                    capacity=1)  # fmt: skip
    release = threading.Event()
    try:
        held = pool.submit(lambda _key: release.wait(WAIT_S), "a")
        assert pool.total == 1  # at capacity: another call of a would be refused

        def refuse(*_args) -> None: ...

        refuse.at_once = True  # type: ignore[attr-defined]

        def in_pool(*_args) -> str:  # grpcio's: submit(run, in_pool, event, state, behaviour, ...)
            return threading.current_thread().name

        answered = pool.submit(lambda fn, *args: fn(*args), in_pool, "a", None, refuse, None,
                               None, None)  # fmt: skip
        assert answered.result(0) == threading.current_thread().name
        assert pool.total == 1 and pool.held("a") == 1
        release.set()
        assert held.result(WAIT_S) is True
    finally:
        release.set()
        pool.shutdown()


def test_the_pools_parts_add_up_to_max_concurrent_rpcs():
    room = call_room(Settings())
    assert (room.unary, room.settle, room.streams, room.probes) == (122, 30, 320, 40)
    assert room.total == Settings().max_concurrent_rpcs == 512
    small = call_room(Settings(max_concurrent_rpcs=401))  # one place to wait, the unary pool's
    assert (small.unary, small.settle, small.total) == (33, 8, 401)
    with pytest.raises(SettingsError, match=r"max_concurrent_rpcs=400: must be above the 400"):
        Settings(max_concurrent_rpcs=400)


# == over gRPC ==============================================================================
# A small server, so that a flood is cheap: its parts of max_concurrent_rpcs=72 are 31
# unary calls (4 threads, 27 waiting), 15 settle, 12 streams, 14 health and reflection.
SMALL = {
    "grpc_workers": 4, "settle_workers": 2, "max_subscribers": 4, "max_health_checks": 2,
    "max_health_watches": 2, "max_health_per_peer": 1, "max_reflection_streams": 1,
    "max_concurrent_rpcs": 72,
}  # fmt: skip
FLOODERS = 4
SLOTS = 32  # stalled Sends each flooder keeps open: 128 in all, above the 72 grpcio takes
HOLD_S = 0.4  # each is held open this long (its deadline), then opened again
STRANGERS = 2  # connections without a token, flooding too (with a token file)
LIGHT_THREADS = 2  # the light caller's calls in flight at once
LIGHT_PAIRS = 8  # Send then Get, by each of its threads
CHECKS = 10  # health Checks without a token during the flood


def own_channel(target: str) -> grpc.Channel:
    return grpc.insecure_channel(target, [("grpc.use_local_subchannel_pool", 1)])


def bearer(token: str | None):
    return (("authorization", f"Bearer {token}"),) if token else None


class Flood:
    """`SLOTS` Sends whose request never comes, on a connection of its own: each is held
    open until its deadline (HOLD_S) and then opened again; one answered sooner (refused)
    waits out its HOLD_S first, so the flood holds its places without spinning.
    `timeout_s`: the calls' deadline, longer for calls answered at once (those without a
    token), so that a busy machine's lag is not taken for their answer."""

    def __init__(self, target: str, token: str | None, timeout_s: float = HOLD_S) -> None:
        self.timeout_s = timeout_s
        self.channel = own_channel(target)
        self.metadata = bearer(token)
        self.codes: Counter[str] = Counter()
        self.grpcio_refused = 0  # "Concurrent RPC limit exceeded!"
        self.shed = 0  # refused by a full pool, naming max_concurrent_rpcs
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="flood", daemon=True)
        self.thread.start()

    def _open(self):
        ended = threading.Event()

        def never():
            ended.wait(WAIT_S * 6)  # sends nothing while the call is open
            return
            yield

        call = self.channel.stream_unary(SEND).future(
            never(), metadata=self.metadata, timeout=self.timeout_s
        )  # fmt: skip
        call.add_done_callback(lambda _call: ended.set())
        return time.monotonic(), call

    def _count(self, call) -> None:
        self.codes[call.code().name] += 1
        details = call.details() or ""
        self.grpcio_refused += GRPCIO_REFUSAL in details
        self.shed += "max_concurrent_rpcs=" in details

    def _run(self) -> None:
        calls = [self._open() for _ in range(SLOTS)]
        while not self.stop.wait(0.02):  # the flood's own pace, not a synchronisation
            now = time.monotonic()
            for i, (opened, call) in enumerate(calls):
                if call.done() and now >= opened + HOLD_S:
                    self._count(call)
                    calls[i] = self._open()
        for _, call in calls:
            call.cancel()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(WAIT_S)
        self.channel.close()


def p99_ms(latencies: list[float]) -> float:
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000


@pytest.mark.parametrize("tokens", [True, False], ids=["tokens", "connections"])
def test_a_light_caller_is_served_while_others_flood_past_grpcios_limit(
    make_server, tmp_path, tokens
):
    """Four flooders (tokens, or connections of a server without tokens) keep 128 stalled
    Sends open against a process whose grpcio takes 72, with two connections without a
    token flooding beside them on the server with tokens. A light caller (two calls in
    flight) and health Checks without a token are all served; no call is ever refused by
    grpcio's own limit; the flood is shed by its pool, naming max_concurrent_rpcs."""
    names = [f"flood-{i}" for i in range(FLOODERS)] + ["light"]
    secret = producer_tokens(tmp_path / "tokens.toml", names) if tokens else {}
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml") if tokens else "")
    server = make_server(security=security, **SMALL)
    target = server.target
    floods = [Flood(target, secret.get(f"flood-{i}")) for i in range(FLOODERS)]
    strangers = [Flood(target, None, WAIT_S) for _ in range(STRANGERS if tokens else 0)]
    light_channel = own_channel(target)
    stub = pb_grpc.TimerServiceStub(light_channel)
    outcomes: list[str] = []
    latencies: list[float] = []
    lock = threading.Lock()

    def light(thread: int) -> None:
        for i in range(LIGHT_PAIRS):
            message_id = f"light-{thread}-{i}"
            send = pb.SendRequest(topic="jobs", body=b"x", delay_ms=3_600_000,
                                  message_id=message_id)  # fmt: skip
            get = pb.GetRequest(message_id=message_id)
            for call, request in ((stub.Send, send), (stub.Get, get)):
                started = time.perf_counter()
                try:
                    call(request, metadata=bearer(secret.get("light")), timeout=WAIT_S)
                    outcome = "OK"
                except grpc.RpcError as error:
                    outcome = f"{error.code().name}: {error.details()}"
                with lock:
                    outcomes.append(outcome)
                    if outcome == "OK":
                        latencies.append(time.perf_counter() - started)

    try:
        until(lambda: sum(f.shed + f.grpcio_refused for f in floods) > 0,
              "the flood fills what the process takes")  # fmt: skip
        shed_before = sum(f.shed for f in floods)
        threads = [threading.Thread(target=light, args=(t,)) for t in range(LIGHT_THREADS)]
        for thread in threads:
            thread.start()
        checks: list[str] = []
        with own_channel(target) as probe:  # a load balancer's probe: no token
            health = health_pb2_grpc.HealthStub(probe)
            for _ in range(CHECKS):
                try:
                    answer = health.Check(health_pb2.HealthCheckRequest(), timeout=WAIT_S)
                    checks.append(health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status))
                except grpc.RpcError as error:
                    checks.append(f"{error.code().name}: {error.details()}")
        for thread in threads:
            thread.join(WAIT_S * LIGHT_PAIRS * 2)
        shed_during = sum(f.shed for f in floods) - shed_before
    finally:
        for flood in floods + strangers:
            flood.close()
        light_channel.close()

    flood_codes = sum((f.codes for f in floods), Counter())
    print(
        f"\n{FLOODERS} {'tokens' if tokens else 'connections'} flooding {FLOODERS * SLOTS} "
        f"stalled Sends (max_concurrent_rpcs={SMALL['max_concurrent_rpcs']}): light caller "
        f"{outcomes.count('OK')}/{len(outcomes)} served, P99 {p99_ms(latencies or [0]):.0f} ms; "
        f"health Check {checks.count('SERVING')}/{CHECKS}; flood {dict(flood_codes)}, "
        f"{shed_during} shed while the light caller ran"
    )
    failed = [outcome for outcome in outcomes if outcome != "OK"]
    assert len(outcomes) == LIGHT_THREADS * LIGHT_PAIRS * 2 and not failed, failed[:3]
    assert checks == ["SERVING"] * CHECKS, checks[:3]
    assert sum(f.grpcio_refused for f in floods + strangers) == 0  # its limit never reached
    assert shed_during > 0  # the flood filled its pool while the light caller was served
    for stranger in strangers:  # without a token: refused at once, never queued or shed
        assert set(stranger.codes) == {"UNAUTHENTICATED"}, stranger.codes
