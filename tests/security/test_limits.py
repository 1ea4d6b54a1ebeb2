"""Fair limits of a gRPC process: request bytes in flight, Subscribe streams per caller,
topic dispatchers freed when idle (timerwheel.security.limits, timerwheel.delivery.hub)."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from helpers.calls import own_connection
from helpers.credentials import write_tokens
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.client import TimerClient
from timerwheel.security.guard import Charged, Refused, Undecodable, charging
from timerwheel.security.limits import ByteBudget, PerKeyLimit, ReceiveGate, receive_gate
from timerwheel.security.settings import SecuritySettings
from timerwheel.server.service import TimerService
from timerwheel.v1 import timerwheel_pb2 as pb
from timerwheel.wheels.domain import Overloaded
from timerwheel.wheels.settings import Settings

MIB = 1024 * 1024


def wait_until(predicate, timeout_s: float = WAIT_S) -> bool:
    """Poll `predicate` (a state owned by another thread we cannot wait on) until true."""
    deadline = time.monotonic() + timeout_s
    pause = threading.Event()
    while not predicate():
        if time.monotonic() > deadline:
            return False
        pause.wait(0.02)
    return True


def test_a_byte_budget_refuses_what_would_go_over_and_frees_on_exit():
    budget = ByteBudget(100, "max_inflight_request_bytes")
    with budget.hold(60, "SendBatch"):
        refused = pytest.raises(Overloaded, match=r"SendBatch of 50 bytes: .* holds 60 bytes")
        with refused, budget.hold(50, "SendBatch"):
            pass
        with budget.hold(40, "Send"):
            assert budget.held == 100
    assert budget.held == 0
    with budget.hold(500, "SendBatch"):  # alone, even a call above the budget is served
        assert budget.held == 500


def test_a_per_key_limit_counts_each_key_apart():
    limit = PerKeyLimit(2, "max_subscribers_per_peer")
    limit.acquire("a", "Subscribe")
    limit.acquire("a", "Subscribe")
    with pytest.raises(Overloaded, match=r"Subscribe: a already holds 2 .*=2"):
        limit.acquire("a", "Subscribe")
    limit.acquire("b", "Subscribe")
    limit.release("a")
    limit.acquire("a", "Subscribe")
    assert limit.count("a") == 2 and limit.count("b") == 1


def refusals(streams: list[Collector]) -> list[Exception]:
    return [s.error for s in streams if s.error is not None]


def test_a_peer_without_a_token_gains_no_subscribe_streams_by_opening_connections(make_server):
    server = make_server(max_subscribers_per_peer=2, max_subscribers=8)
    greedy = TimerClient(server.target, timeout_s=WAIT_S, connections=3)  # 3 connections
    other = own_connection(server.target)  # a fourth, from the same address
    streams: list[Collector] = []
    try:
        streams = [Collector(greedy, f"idle{n}") for n in range(3)]
        streams.append(Collector(other, "idle3"))
        assert wait_until(lambda: sum(s.ended.is_set() for s in streams) == 2)
        assert server.hub.subscriber_count() == 2
        for error in refusals(streams):
            assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "Subscribe: peer 127.0.0.1 already holds 2" in error.details
            assert "max_subscribers_per_peer=2" in error.details
    finally:
        for stream in streams:
            stream.stop()
        greedy.close()
        other.close()


def test_one_token_over_many_connections_cannot_take_every_subscribe_stream(make_server, tmp_path):
    """The attack of issue 76: a tenant's idle streams over many connections filled all
    `max_subscribers` slots (the limit was per connection), and a real consumer with
    another token was refused. Now the tenant's token holds `max_subscribers_per_peer`."""
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, max_subscribers_per_peer=4, max_subscribers=8)
    greedy = TimerClient(
        server.target, timeout_s=WAIT_S, token=tokens["consumer"], connections=4
    )  # fmt: skip
    polite = TimerClient(server.target, timeout_s=WAIT_S, token=tokens["orders-consumer"])
    producer = TimerClient(server.target, timeout_s=WAIT_S, token=tokens["admin"])
    streams: list[Collector] = []
    try:
        # 12 streams over 4 connections: per connection they would all fit (3 each), and
        # 8 of them would fill the server.
        streams = [Collector(greedy, f"idle{n}") for n in range(12)]
        assert wait_until(lambda: sum(s.ended.is_set() for s in streams) == 8)
        assert server.hub.subscriber_count() == 4
        errors = refusals(streams)
        assert len(errors) == 8
        for error in errors:
            assert error.code is grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "Subscribe: token 'consumer' already holds 4" in error.details
            assert "max_subscribers_per_peer=4" in error.details
        consumer = Collector(polite, "orders.eu")  # another token is still served
        streams.append(consumer)
        producer.send("orders.eu", b"pay #42", delay_ms=0)
        assert consumer.wait_count(1)[0].body == b"pay #42"
        assert consumer.error is None
    finally:
        for stream in streams:
            stream.stop()
        for client in (greedy, polite, producer):
            client.close()


def test_dispatchers_of_topics_nobody_uses_any_more_are_freed(server, client):
    baseline = server.hub.topic_count()
    streams = [Collector(client, f"once{n}") for n in range(20)]
    assert wait_until(lambda: server.hub.subscriber_count() == 20)
    assert server.hub.topic_count() == baseline + 20
    for stream in streams:
        stream.stop()
    assert wait_until(lambda: server.hub.topic_count() == baseline)
    again = Collector(client, "once3")  # a freed topic works as before
    try:
        client.send("once3", b"later", delay_ms=0)
        assert again.wait_count(1)[0].body == b"later"
    finally:
        again.stop()


def test_the_receive_gate_keeps_a_place_for_other_callers_and_gives_up_on_a_gone_call():
    gate = ReceiveGate(places=3, per_key=2)
    assert gate.acquire("a", lambda: True) and gate.acquire("a", lambda: True)
    calls = 0

    def gone() -> bool:  # the call's client went away while it waited
        nonlocal calls
        calls += 1
        return False

    assert gate.acquire("a", gone, check_s=0.01) is False  # a's share is full
    assert calls == 1 and gate.held == 2
    assert gate.acquire("b", lambda: True)  # another caller gets the place left
    got = threading.Event()

    def wait_for_a_place() -> None:
        if gate.acquire("c", lambda: True):
            got.set()

    waiter = threading.Thread(target=wait_for_a_place)
    waiter.start()
    assert not got.wait(0.05)  # every place is taken: it waits, it is not refused
    gate.release("a")
    assert got.wait(WAIT_S)  # a release wakes it
    waiter.join(WAIT_S)
    assert gate.held == 3


class Waiter:
    """A thread waiting for a place of `gate` as `key`; `got` once it has one."""

    def __init__(self, gate: ReceiveGate, key: str, order: list[str]) -> None:
        self.got = threading.Event()
        waiting = gate.waiting

        def run() -> None:
            assert gate.acquire(key, lambda: True)
            order.append(key)
            self.got.set()

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert wait_until(lambda: gate.waiting == waiting + 1)  # in line, in this order


def test_the_receive_gate_gives_freed_places_in_turn_and_the_last_to_a_caller_reading_nothing():
    """Waiters used to race for each freed place; a caller's small request then lost to
    two other tenants' many big ones for seconds."""
    gate = ReceiveGate(places=4, per_key=3)
    for key in ("a", "a", "a", "b"):  # a holds its share, b the last place (it held none)
        assert gate.acquire(key, lambda: True)
    order: list[str] = []
    waiters = [Waiter(gate, key, order) for key in ("a", "b", "a", "c")]
    gate.release("a")  # the last free place: not to a or b, which are reading already
    assert waiters[3].got.wait(WAIT_S) and order == ["c"]
    gate.release("c")  # the last place again: a and b are reading, so it stays free
    assert (gate.held, gate.waiting) == (3, 3)  # (given out within release, or never)
    gate.release("b")  # two free: the first to a (its turn: it waited first), the last to b
    assert waiters[0].got.wait(WAIT_S) and waiters[1].got.wait(WAIT_S)
    # both granted within that one release; which woken thread appends first is the OS's
    assert order[0] == "c" and sorted(order[1:]) == ["a", "b"]
    gate.release("b")  # a's second call: not the last place, while a reads two already
    assert (gate.held, gate.waiting) == (3, 1)
    gate.release("a")
    assert waiters[2].got.wait(WAIT_S) and order[3:] == ["a"]

    turns = ReceiveGate(places=1, per_key=1)
    assert turns.acquire("a", lambda: True)
    taken: list[str] = []
    queued = [Waiter(turns, key, taken) for key in ("a", "a", "b")]
    for count in (1, 2, 3):
        turns.release(taken[-1] if taken else "a")
        assert wait_until(lambda count=count: len(taken) == count)
    assert taken == ["a", "b", "a"]  # in turn, not in order of arrival (a, a, b)
    assert all(waiter.got.is_set() for waiter in queued)


def test_receive_gates_leave_one_place_for_others_and_scale_with_the_budget():
    default = receive_gate(Settings())
    assert (default.places, default.per_key) == (4, 3)  # 2 x 32 MiB / 16 MiB
    small = receive_gate(Settings(max_inflight_request_bytes=16 * MIB))
    assert (small.places, small.per_key) == (2, 1)


def test_a_request_over_the_byte_budget_is_refused_before_it_is_decoded():
    budget = ByteBudget(1_000, "max_inflight_request_bytes")
    decoded: list[bytes] = []

    def decode(data: bytes) -> bytes:
        decoded.append(data)
        return data

    deserialize = charging(decode, budget, "SendBatch")
    first = deserialize(b"x" * 600)
    assert isinstance(first, Charged) and first.size == 600 and budget.held == 600
    second = deserialize(b"y" * 600)
    assert isinstance(second, Refused) and decoded == [b"x" * 600]  # never decoded
    assert "SendBatch request of 600 bytes" in second.reason
    assert "max_inflight_request_bytes=1000" in second.reason
    assert budget.held == 600  # the refusal holds nothing

    def undecodable(data: bytes) -> bytes:
        raise ValueError("truncated")

    budget.give_back(first.size)
    bad = charging(undecodable, budget, "Send")(b"z" * 10)
    assert isinstance(bad, Undecodable) and budget.held == 0  # its bytes are given back


class Aborted(Exception):
    pass


class FakeContext:
    def abort(self, code: grpc.StatusCode, details: str):
        raise Aborted(code, details)


class ListingEngine:
    """An engine whose List reads nothing: it records that it was asked."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.asked = 0

    def list_pending(self, *args):
        self.asked += 1
        return [], ""


def test_a_list_with_bodies_takes_its_page_from_the_budget_before_it_reads():
    settings = Settings()
    engine = ListingEngine(settings)
    budget = ByteBudget(settings.max_inflight_request_bytes, "max_inflight_request_bytes")
    service = TimerService(engine, hub=None, budget=budget)  # type: ignore[arg-type]
    request = pb.ListRequest(topic="big", include_body=True)
    budget.take(settings.max_inflight_request_bytes - 1024, "SendBatch")  # nearly full
    with pytest.raises(Aborted) as refused:
        service.List(request, FakeContext())  # type: ignore[arg-type]
    code, details = refused.value.args
    assert code is grpc.StatusCode.RESOURCE_EXHAUSTED and engine.asked == 0
    assert f"List response with bodies of {settings.max_list_bytes} bytes" in details
    assert "max_inflight_request_bytes=" in details
    # Without bodies a page takes nothing from the budget, and is served.
    service.List(pb.ListRequest(topic="big"), FakeContext())  # type: ignore[arg-type]
    assert engine.asked == 1 and budget.held == settings.max_inflight_request_bytes - 1024


SEND = "/timerwheel.v1.TimerService/Send"


class StalledSend:
    """A Send with a token whose request never comes: headers only, until released."""

    def __init__(self, channel: grpc.Channel, token: str) -> None:
        self.release = threading.Event()

        def never():
            self.release.wait(WAIT_S * 6)
            return
            yield  # a generator that sends nothing until released

        stalled = channel.stream_unary(SEND)
        metadata = (("authorization", f"Bearer {token}"),)
        self.call = stalled.future(never(), metadata=metadata, timeout=WAIT_S * 6)

    def close(self) -> None:
        self.release.set()
        self.call.cancel()


def test_a_token_stalled_in_its_requests_holds_its_share_of_reading_and_no_more(
    make_server, tmp_path
):
    """Requests are read a few at a time (timerwheel.security.limits.ReceiveGate), so that
    what grpcio holds before the byte budget sees it is bounded; a caller that sends
    headers and never its request must not take every place."""
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security)
    gate = receive_gate(Settings())
    channel = grpc.insecure_channel(server.target, [("grpc.use_local_subchannel_pool", 1)])
    stalls = [StalledSend(channel, tokens["producer"]) for _ in range(gate.places + 1)]
    other = TimerClient(server.target, timeout_s=WAIT_S, token=tokens["admin"])
    try:
        result = other.send("jobs", b"served", delay_ms=60_000, message_id="other-token")
        assert result.message_id == "other-token"
        assert other.get("other-token").body == b"served"
    finally:
        for stall in stalls:
            stall.close()
        other.close()
        channel.close()
    same = TimerClient(server.target, timeout_s=WAIT_S, token=tokens["producer"])
    try:  # the stalled calls ended: the token's own places are back
        assert same.send("jobs", b"later", delay_ms=60_000).message_id
    finally:
        same.close()


def test_a_subscribe_request_padded_to_a_megabyte_is_refused_before_it_is_decoded(server):
    """An open stream keeps its request: padded with unknown fields it would hold a
    megabyte (and its charge of the byte budget) for as long as it stays open."""
    padded = pb.SubscribeRequest(topic="orders").SerializeToString()
    padded += b"\x7a" + b"\x80\x80\x40" + b"\x00" * MIB  # field 15, bytes, 1 MiB: unknown
    with grpc.insecure_channel(server.target) as channel:
        subscribe = channel.unary_stream(
            "/timerwheel.v1.TimerService/Subscribe",
            request_serializer=lambda raw: raw,
            response_deserializer=pb.DeliveryBatch.FromString,
        )
        with pytest.raises(grpc.RpcError) as refused:
            next(subscribe(padded, timeout=WAIT_S))
    assert refused.value.code() is grpc.StatusCode.INVALID_ARGUMENT
    expected = f"TimerService.Subscribe: a request of {len(padded)} bytes; at most 4096"
    assert refused.value.details() == expected
    assert server.hub.subscriber_count() == 0
