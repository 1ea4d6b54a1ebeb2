"""TimerAdmin BulkCancel, Purge and Redrive over real gRPC on loopback: what each
reports, that delivery lets go of what a purge or redrive took, bad input, and the role
table (a consumer token cannot purge)."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from helpers.calls import status_of
from helpers.credentials import write_tokens
from helpers.streams import Collector
from helpers.waits import WAIT_S

from timerwheel.aio import AsyncClient
from timerwheel.client import TimerClient
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb

F = TimerClient.timer_filter
DENIED = grpc.StatusCode.PERMISSION_DENIED


def test_bulk_cancel_and_purge_report_what_they_did_page_by_page(client):
    pending = [client.send("orders", b"x", delay_ms=3_600_000 + i).message_id for i in range(3)]
    other = client.send("payments", b"x", delay_ms=3_600_000).message_id
    first = client.bulk_cancel(F(topic="orders"), limit=2)
    assert (first.cancelled, first.purged, first.more) == (2, 0, True)
    assert first.next_page_token
    rest = client.bulk_cancel(F(topic="orders"), limit=2, page_token=first.next_page_token)
    assert (rest.cancelled, rest.more, rest.next_page_token) == (1, False, "")
    assert [client.get(i).state for i in pending] == [pb.CANCELLED] * 3
    assert client.get(other).state == pb.SCHEDULED
    assert client.count("orders").pending == 0


def test_a_purge_frees_the_subscribers_room_and_nothing_purged_comes_back(client, collectors):
    holder = Collector(client, "orders", max_in_flight=2, auto_ack=False)
    collectors.append(holder)
    held = [client.send("orders", b"held", delay_ms=0).message_id for _ in range(2)]
    assert {d.message_id for d in holder.wait_count(2)} == set(held)
    pending = client.send("orders", b"later", delay_ms=3_600_000).message_id
    purged = client.purge(F(topic="orders"))
    assert (purged.cancelled, purged.purged, purged.more) == (1, 2, False)
    assert [client.get(i).state for i in [*held, pending]] == [pb.CANCELLED] * 3
    assert client.topics() == []
    assert client.stats().unacked == 0
    # Both of the holder's places were taken by the purged messages: a message sent now
    # reaches it only because the purge gave them back, and it is the only one that does.
    fresh = client.send("orders", b"fresh", delay_ms=0).message_id
    deliveries = holder.wait_count(3)
    assert [d.message_id for d in deliveries[2:]] == [fresh]
    assert client.ack("orders", held) == 0, "purged messages are no longer to be acked"


def test_redrive_moves_dead_letters_back_and_they_are_delivered_again(client, collectors):
    failing = Collector(client, "jobs", auto_ack=False)
    collectors.append(failing)
    dead = client.send("jobs", b"x", delay_ms=0, max_attempts=1).message_id
    failing.wait_count(1)
    assert client.nack("jobs", [dead], reason="broken").dead_lettered == 1
    assert client.get(dead).topic == "jobs.dlq"
    failing.stop()

    moved = client.redrive("jobs.dlq", F(topic="jobs"))
    assert (moved.moved, moved.more, moved.next_page_token) == (1, False, "")
    again = Collector(client, "jobs")
    collectors.append(again)
    [delivery] = again.wait_count(1)
    assert (delivery.message_id, delivery.attempt) == (dead, 1)
    assert not [k for k in delivery.properties if k.startswith("timerwheel.dead_letter.")]
    traced = client.get(dead, include_trace=True)
    kinds = [pb.TraceKind.Name(e.kind).removeprefix("TRACE_") for e in traced.trace]
    assert "REDRIVEN" in kinds and traced.trace[kinds.index("REDRIVEN")].detail == "jobs"
    assert client.redrive("jobs.dlq").moved == 0


def test_the_async_client_makes_the_same_calls(server):
    async def main():
        async with AsyncClient(server.target, timeout_s=WAIT_S) as client:
            kept = await client.send("orders", b"x", delay_ms=3_600_000)
            fired = await client.send("orders", b"x", delay_ms=0)
            cancelled = await client.bulk_cancel(client.timer_filter(topic="orders"))
            purged = await client.purge(client.timer_filter(topic="orders"))
            moved = await client.redrive("orders.dlq")
            states = [(await client.get(s.message_id)).state for s in (kept, fired)]
            return cancelled.cancelled, purged.purged, moved.moved, states

    cancelled, purged, moved, states = asyncio.run(asyncio.wait_for(main(), WAIT_S * 3))
    assert (cancelled, purged, moved) == (1, 1, 0)
    assert [int(s) for s in states] == [pb.CANCELLED] * 2


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda c: c.purge(F()), "filter='{}'"),
        (lambda c: c.bulk_cancel(F(topic="orders", from_ms=5, to_ms=5)), "filter.to_ms=5"),
        (lambda c: c.bulk_cancel(F(topic="bad topic!")), "filter.topic='bad topic!'"),
        (lambda c: c.purge(F(series_id="s#2")), "filter.series_id='s#2'"),
        (lambda c: c.purge(F(topic="orders"), limit=20_000), "limit=20000"),
        (lambda c: c.bulk_cancel(F(topic="orders"), page_token="junk!"), "page_token='junk!'"),
        (lambda c: c.redrive(""), "dead_letter_topic=''"),
        (lambda c: c.redrive("orders.dlq", limit=-1), "limit=-1"),
    ],
)
def test_bad_input_is_invalid_argument_naming_field_and_value_and_changes_nothing(
    client, call, named
):
    kept = client.send("orders", b"x", delay_ms=3_600_000).message_id
    error = status_of(lambda: call(client))
    assert error.code == grpc.StatusCode.INVALID_ARGUMENT
    assert named in error.details, error.details
    assert client.get(kept).state == pb.SCHEDULED and client.count("orders").pending == 1


# == roles (docs/security.md) ================================================================
@pytest.fixture
def tokened(make_server, tmp_path):
    """A server with tokens (loopback: no TLS needed) and an admin client."""
    tokens = write_tokens(tmp_path / "tokens.toml")
    server = make_server(security=SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml")))
    clients: list[TimerClient] = []

    def connect(name: str) -> TimerClient:
        clients.append(TimerClient(server.target, timeout_s=WAIT_S, token=tokens[name]))
        return clients[-1]

    try:
        yield connect
    finally:
        for made in clients:
            made.close()


CALLS = {
    "BulkCancel": lambda c: c.bulk_cancel(F(topic="orders.eu")),
    "Purge": lambda c: c.purge(F(topic="orders.eu")),
    "Redrive": lambda c: c.redrive("orders.eu.dlq"),
}
ALLOWED = {
    "producer": {"BulkCancel"},
    "orders-producer": {"BulkCancel"},
    "consumer": set(),
    "orders-consumer": set(),
    "admin": set(CALLS),
}


@pytest.mark.parametrize(("role", "method"), [(r, m) for r in ALLOWED for m in CALLS])
def test_each_role_cell_of_the_bulk_calls(tokened, role, method):
    admin, caller = tokened("admin"), tokened(role)
    kept = admin.send("orders.eu", b"x", delay_ms=3_600_000).message_id
    if method in ALLOWED[role]:
        CALLS[method](caller)
        assert admin.get(kept).state == pb.CANCELLED or method == "Redrive"
        return
    error = status_of(lambda: CALLS[method](caller))
    assert error.code == DENIED and method in error.details
    assert admin.get(kept).state == pb.SCHEDULED, "a refused call changes nothing"


def test_a_topic_limited_producer_bulk_cancels_only_inside_its_prefixes(tokened):
    admin, producer = tokened("admin"), tokened("orders-producer")
    theirs = admin.send("payments", b"x", delay_ms=3_600_000).message_id
    mine = admin.send("orders.eu", b"x", delay_ms=3_600_000, message_id="acct-1").message_id
    for selection, field in [(F(topic="payments"), "filter.topic='payments'"),
                             (F(id_prefix="acct-"), "filter.topic=''")]:  # fmt: skip
        error = status_of(lambda s=selection: producer.bulk_cancel(s))
        assert error.code == DENIED and field in error.details, error.details
    assert admin.get(theirs).state == admin.get(mine).state == pb.SCHEDULED
    # The admin's id is unscoped: the token names it, and its prefix, with a leading `/`
    # (a plain prefix selects the token's own scoped ids: decision 0012).
    done = producer.bulk_cancel(F(topic="orders.eu", id_prefix="/acct-"))
    assert done.cancelled == 1 and admin.get(mine).state == pb.CANCELLED
