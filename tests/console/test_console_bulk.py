"""The console's purge and redrive: the endpoints over real HTTP, and the page's actions,
with their confirmation and roles, in a real headless Chromium."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from helpers.console_page import chromium_page
from helpers.credentials import write_tokens
from helpers.streams import Collector
from helpers.waits import WAIT_S
from playwright.sync_api import expect

from timerwheel import Client, State
from timerwheel.security.settings import SecuritySettings

pytestmark = pytest.mark.wallclock

JSON = {"Content-Type": "application/json"}


def http(port: int, path: str, *, body: object, headers: dict | None = None):
    """(status, JSON answer, headers) of one POST to the console on `port`."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
        headers=headers or {}, method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            return answer.status, json.loads(answer.read()), answer.headers
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), error.headers


def dead_letter(client: Client, collectors: list, topic: str = "jobs") -> str:
    """A message of `topic` moved to `<topic>.dlq` by a nack on its last attempt."""
    failing = Collector(client, topic, auto_ack=False)
    collectors.append(failing)
    message_id = client.send(topic, b"x", delay_ms=0, max_attempts=1).message_id
    failing.wait_count(1)
    assert client.nack(topic, [message_id], reason="broken").dead_lettered == 1
    failing.stop()
    return message_id


def test_purge_and_redrive_endpoints(make_server, collectors):
    server = make_server(console_port=0)
    port = server.console.port
    with Client(server.target, timeout_s=WAIT_S) as client:
        pending = client.send("orders", b"x", delay_ms="1h").message_id
        fired = client.send("orders", b"x", delay_ms=0).message_id
        status, answer, _ = http(port, "/api/purge", body={"topic": "orders"}, headers=JSON)
        assert (status, answer) == (
            200, {"topic": "orders", "cancelled": 1, "purged": 1, "more": False},
        )  # fmt: skip
        assert [client.get(i).state for i in (pending, fired)] == [State.CANCELLED] * 2

        dead = dead_letter(client, collectors)
        body = {"dead_letter_topic": "jobs.dlq"}
        status, answer, _ = http(port, "/api/redrive", body=body, headers=JSON)
        assert (status, answer) == (
            200, {"dead_letter_topic": "jobs.dlq", "moved": 1, "more": False},
        )  # fmt: skip
        assert client.get(dead).topic == "jobs"

        # Bad requests name what is wrong; a form post is refused.
        status, answer, _ = http(port, "/api/purge", body={"topic": ""}, headers=JSON)
        assert (status, answer["error"]) == (400, "topic='': give the topic to purge")
        status, answer, _ = http(port, "/api/purge", body={"topic": "a b"}, headers=JSON)
        assert status == 400 and answer["error"].startswith("filter.topic='a b'")
        status, answer, _ = http(port, "/api/redrive", body={"dead_letter_topic": "x"})
        assert status == 400 and "as JSON" in answer["error"]


def test_a_consumer_token_cannot_purge_or_redrive_through_the_console(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, console_port=0)
    port = server.console.port
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as client:
        kept = client.send("orders", b"x", delay_ms="1h").message_id
        for role in ("consumer", "producer"):
            auth = {**JSON, "Authorization": f"Bearer {tokens[role]}"}
            for path, body in [("/api/purge", {"topic": "orders"}),
                               ("/api/redrive", {"dead_letter_topic": "orders.dlq"})]:  # fmt: skip
                status, answer, _ = http(port, path, body=body, headers=auth)
                assert (status, answer["code"]) == (403, "PERMISSION_DENIED")
                assert f"role {role}" in answer["error"]
        assert client.get(kept).state is State.SCHEDULED


@pytest.mark.system  # a headless Chromium
def test_purge_and_redrive_in_the_browser_through_their_confirmation(make_server, collectors):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        pending = [client.send("orders", b"x", delay_ms="1h").message_id for _ in range(2)]
        dead = dead_letter(client, collectors)
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.wait_for_selector("#topics tbody tr")

            # Choosing a topic offers it for the actions; "No" changes nothing.
            page.click("#topics a:text-is('orders')")
            expect(page.locator("#bulk-topic")).to_have_value("orders")
            page.click("#purge-button")
            expect(page.locator("#bulk-question")).to_contain_text("Purge orders?")
            page.click("#bulk-no")
            assert page.is_hidden("#bulk-confirm")
            assert [client.get(i).state for i in pending] == [State.SCHEDULED] * 2

            page.click("#purge-button")
            page.click("#bulk-yes")
            expect(page.locator("#bulk-result")).to_have_text("orders: cancelled 2, purged 0")
            assert [client.get(i).state for i in pending] == [State.CANCELLED] * 2

            page.fill("#bulk-topic", "jobs.dlq")
            page.click("#redrive-button")
            expect(page.locator("#bulk-question")).to_contain_text("dead letter of jobs.dlq")
            page.click("#bulk-yes")
            expect(page.locator("#bulk-result")).to_have_text("jobs.dlq: moved 1 back")
            assert client.get(dead).topic == "jobs"

            page.fill("#bulk-topic", "")
            page.click("#purge-button")
            expect(page.locator("#bulk-error")).to_have_text("Give a topic first.")
            assert page.is_hidden("#bulk-confirm")


@pytest.mark.system  # a headless Chromium
def test_a_consumer_token_cannot_purge_in_the_browser(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, console_port=0)
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as client:
        kept = client.send("orders", b"x", delay_ms="1h").message_id
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.wait_for_selector("#auth:not([hidden])")
            page.fill("#token-input", tokens["consumer"])
            page.click("#token-form button")
            page.fill("#bulk-topic", "orders")
            page.click("#purge-button")
            page.click("#bulk-yes")
            expect(page.locator("#bulk-error")).to_contain_text("Purge is not allowed")
            expect(page.locator("#bulk-error")).to_contain_text("role consumer")
            assert client.get(kept).state is State.SCHEDULED

            page.click("#forget-token")
            page.fill("#token-input", tokens["admin"])
            page.click("#token-form button")
            page.fill("#bulk-topic", "orders")
            page.click("#purge-button")
            page.click("#bulk-yes")
            expect(page.locator("#bulk-result")).to_have_text("orders: cancelled 1, purged 0")
            assert client.get(kept).state is State.CANCELLED
