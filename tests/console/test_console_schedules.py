"""The console's pause and resume endpoints over real HTTP, against a real server
(timerwheel.console.app): JSON only, the series as Get shows it after, the API's refusals
as HTTP statuses and its roles deciding."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S

from timerwheel import Client
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb

HOUR_MS = 3_600_000
JSON = {"Content-Type": "application/json"}


def http(port: int, path: str, body: object, headers: dict) -> tuple[int, dict]:
    """(status, JSON answer) of one POST to the console on `port`."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(), headers=headers,
        method="POST",
    )  # fmt: skip
    try:
        with urllib.request.urlopen(request, timeout=WAIT_S) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture
def console(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        yield server.console.port, client


def test_pause_then_resume_a_series_from_the_console(console):
    port, client = console
    client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="nightly",
                repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, _ = http(port, "/api/pause", body={"series_id": "nightly"}, headers=form)
    assert status == 400 and not client.get("nightly").paused  # a cross-site form cannot

    status, answer = http(port, "/api/pause", body={"series_id": "nightly"}, headers=JSON)
    assert status == 200 and answer["changed"] is True
    assert answer["timer"]["paused"] is True and client.get("nightly").paused
    status, answer = http(port, "/api/pause", body={"series_id": "nightly"}, headers=JSON)
    assert (status, answer["changed"]) == (200, False)

    status, answer = http(port, "/api/resume", body={"series_id": "nightly"}, headers=JSON)
    assert (status, answer["changed"], answer["timer"]["paused"]) == (200, True, False)


def test_console_pause_refusals_come_back_as_statuses(console):
    port, client = console
    client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="plain")
    status, answer = http(port, "/api/pause", body={"series_id": "plain"}, headers=JSON)
    assert status == 409 and "not a recurring series" in answer["error"]
    status, answer = http(port, "/api/resume", body={"series_id": "none"}, headers=JSON)
    assert (status, answer["code"]) == (404, "NOT_FOUND")
    status, answer = http(port, "/api/pause", body={"series_id": 7}, headers=JSON)
    assert (status, answer["error"]) == (400, "series_id=7: give the series to pause")


def test_a_consumer_token_cannot_pause_from_the_console(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(console_port=0, security=security)
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as admin:
        admin.send("jobs", b"x", delay_ms=HOUR_MS, message_id="s",
                   repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
        port = server.console.port
        as_consumer = {**JSON, "Authorization": f"Bearer {tokens['consumer']}"}
        status, answer = http(port, "/api/pause", body={"series_id": "s"}, headers=as_consumer)
        assert (status, answer["code"]) == (403, "PERMISSION_DENIED")
        as_producer = {**JSON, "Authorization": f"Bearer {tokens['producer']}"}
        status, _ = http(port, "/api/pause", body={"series_id": "s"}, headers=as_producer)
        assert status == 200 and admin.get("s").paused
