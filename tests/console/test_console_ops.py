"""The console's operator endpoints (console/ops.py) over real HTTP against a real server:
in flight, consumers, search, throughput, fire now and reschedule, their errors and roles."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from datetime import UTC, datetime

import pytest
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S

from timerwheel import Client, State
from timerwheel.security.settings import SecuritySettings

pytestmark = pytest.mark.wallclock

JSON = {"Content-Type": "application/json"}


def http(port: int, path: str, *, body: object = None, headers: dict | None = None):
    """(status, JSON answer, headers) of one request to the console on `port`."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=data, headers=headers or {},
        method="GET" if data is None else "POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            return answer.status, json.loads(answer.read()), answer.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), error.headers


def eventually(probe, timeout_s: float = WAIT_S):
    until = time.monotonic() + timeout_s
    while not (value := probe()):
        assert time.monotonic() < until, "condition not met in time"
        time.sleep(0.02)
    return value


@pytest.fixture
def console(make_server):
    server = make_server(console_port=0, ack_timeout_ms=60_000)
    with Client(server.target, timeout_s=WAIT_S) as client:
        yield server.console.port, client


def test_in_flight_and_consumers(console):
    port, client = console
    sent = client.send("billing", b"x", delay_ms=0).message_id
    with client.subscribe("billing", max_in_flight=5, consumer="biller") as subscription:
        batch = next(iter(subscription))
        assert [d.message_id for d in batch] == [sent]
        status, answer, _ = http(port, "/api/inflight?topic=billing")
        assert status == 200
        [message] = answer["messages"]
        assert (message["message_id"], message["attempt"], message["consumer"]) == (
            sent, 1, "biller",
        )  # fmt: skip
        assert message["in_flight"] and message["ack_due_in_ms"] > 0
        assert (answer["fired_unacked"], answer["tracked"]) == (1, 1)

        status, answer, _ = http(port, "/api/consumers")
        assert status == 200
        [stream] = answer["consumers"]
        assert (stream["topic"], stream["consumer"]) == ("billing", "biller")
        assert stream["in_flight"] == 1
        [lag] = [t for t in answer["lag"] if t["topic"] == "billing"]
        assert (lag["consumers"], lag["fired_unacked"], lag["in_flight"]) == (1, 1, 1)
        assert lag["oldest_unacked"]["relative"].endswith("ago")

    status, answer, _ = http(port, "/api/inflight?topic=")
    assert (status, answer["error"]) == (400, "topic='': give a topic")


def test_search_with_prefix_property_time_and_pages(console):
    port, client = console
    now = client.stats().now_ms
    for n in range(5):
        client.send(
            "shop", b"x", deliver_at_ms=now + 3_600_000 + n * 60_000, message_id=f"cart-{n}",
            properties={"region": "eu" if n % 2 else "us"},
        )  # fmt: skip
    status, answer, _ = http(port, "/api/search?topic=shop&property=region=eu")
    assert status == 200 and [t["message_id"] for t in answer["timers"]] == ["cart-1", "cart-3"]
    window = f"from_ms={now + 3_600_000 + 60_000}&to_ms={now + 3_600_000 + 3 * 60_000}"
    status, answer, _ = http(port, f"/api/search?topic=shop&id_prefix=cart-&{window}")
    assert [t["message_id"] for t in answer["timers"]] == ["cart-1", "cart-2"]
    status, answer, _ = http(port, "/api/search?topic=shop&id_prefix=cart&limit=3")
    assert len(answer["timers"]) == 3 and answer["next_page_token"]
    token = answer["next_page_token"]
    path = f"/api/search?topic=shop&id_prefix=cart&limit=3&page_token={token}"
    status, answer, _ = http(port, path)
    assert [t["message_id"] for t in answer["timers"]] == ["cart-3", "cart-4"]
    status, answer, _ = http(port, "/api/search?topic=shop&property=region")
    assert (status, answer["error"]) == (400, "property='region': give key=value")


def test_throughput_counts_what_happened(console):
    port, client = console
    _, before, _ = http(port, "/api/throughput")
    client.send("t", b"x", delay_ms="1h")
    client.send("t", b"x", delay_ms="1h")
    _, after, _ = http(port, "/api/throughput")
    assert after["sends_total"] - before["sends_total"] == 2
    assert after["now_ms"] >= before["now_ms"]
    assert set(after) == {"now_ms", "sends_total", "fires_total", "acks_total"}


def test_fire_now_and_reschedule(console):
    port, client = console
    later = client.send("jobs", b"x", delay_ms="1h").message_id
    status, answer, _ = http(port, "/api/reschedule", body={"message_id": later, "when": "2h"},
                             headers=JSON)  # fmt: skip
    assert status == 200 and answer["timer"]["trace"][-1]["kind"] == "RESCHEDULED"
    moved = client.get(later).deliver_at_ms - client.stats().now_ms
    assert 2 * 3_600_000 - 60_000 < moved <= 2 * 3_600_000

    at_ms = client.stats().now_ms // 60_000 * 60_000 + 3 * 3_600_000  # a whole minute
    iso = datetime.fromtimestamp(at_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M")
    status, answer, _ = http(port, "/api/reschedule", body={"message_id": later, "when": iso},
                             headers=JSON)  # fmt: skip
    assert status == 200, answer
    assert answer["timer"]["deliver_at"]["iso"] == iso + ":00.000Z"  # no zone given: UTC
    assert client.get(later).deliver_at_ms == at_ms
    status, answer, _ = http(port, "/api/reschedule",
                             body={"message_id": later, "when": "soon"}, headers=JSON)  # fmt: skip
    assert status == 400 and answer["error"].startswith("when='soon': give a time")

    status, answer, _ = http(port, "/api/fire-now", body={"message_id": later}, headers=JSON)
    assert status == 200
    eventually(lambda: client.get(later).state is State.FIRED)
    # Once fired, it cannot be moved: the API's FAILED_PRECONDITION, as 409.
    status, answer, _ = http(port, "/api/fire-now", body={"message_id": later}, headers=JSON)
    assert (status, answer["code"]) == (409, "FAILED_PRECONDITION")
    status, answer, _ = http(port, "/api/fire-now", body={"message_id": later})
    assert status == 400 and "as JSON" in answer["error"]


def test_roles_decide(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, console_port=0)
    port = server.console.port
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as client:
        timer = client.send("orders", b"x", delay_ms="1h")
        for role in ("consumer", "producer"):
            auth = {**JSON, "Authorization": f"Bearer {tokens[role]}"}
            for path in ("/api/inflight?topic=orders", "/api/consumers", "/api/throughput"):
                status, answer, _ = http(port, path, headers=auth)
                assert (status, answer["code"]) == (403, "PERMISSION_DENIED"), (role, path)
        consumer = {**JSON, "Authorization": f"Bearer {tokens['consumer']}"}
        moves = [
            ("/api/fire-now", {"message_id": timer.message_id}),
            ("/api/reschedule", {"message_id": timer.message_id, "when": "5m"}),
        ]
        for path, body in moves:
            status, answer, _ = http(port, path, body=body, headers=consumer)
            assert (status, answer["code"]) == (403, "PERMISSION_DENIED")
            assert "role consumer" in answer["error"]
        status, _, _ = http(port, "/api/search?topic=orders&id_prefix=x", headers=consumer)
        assert status == 403
        kept = client.get(timer.message_id)
        assert (kept.state, kept.deliver_at_ms) == (State.SCHEDULED, timer.deliver_at_ms)

        producer = {**JSON, "Authorization": f"Bearer {tokens['producer']}"}
        status, _, _ = http(port, "/api/fire-now", body={"message_id": timer.message_id},
                            headers=producer)  # fmt: skip
        assert status == 200
