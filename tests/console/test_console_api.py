"""The web console's JSON endpoints over real HTTP, against a real server (timerwheel.console.app),
and how `serve --console-port` starts it (one process and --workers N)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S

from timerwheel import Client, State
from timerwheel.console.http import api_target
from timerwheel.console.views import relative
from timerwheel.security.settings import SecuritySettings
from timerwheel.wheels.settings import Settings, SettingsError

pytestmark = pytest.mark.wallclock

MINUTE_MS = 60_000


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


JSON = {"Content-Type": "application/json"}


@pytest.fixture
def console(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        yield server.console.port, client


def test_unknown_id_is_404_naming_the_id(console):
    port, _ = console
    status, answer, _ = http(port, "/api/timer?id=order-42")
    assert status == 404
    assert answer == {"error": "message_id='order-42': no such timer", "code": "NOT_FOUND"}
    status, answer, _ = http(port, "/api/cancel", body={"message_id": "order-42"}, headers=JSON)
    assert status == 404 and "order-42" in answer["error"]


def test_bad_paging_token_is_400_naming_it(console):
    port, _ = console
    status, answer, _ = http(port, "/api/pending?topic=orders&page_token=not-a-token")
    assert status == 400 and answer["code"] == "INVALID_ARGUMENT"
    assert "page_token='not-a-token'" in answer["error"]
    for query, named in (
        ("topic=orders&limit=abc", "limit='abc': not an integer"),
        ("topic=orders&limit=0", "limit=0: must be 1..500"),
        ("topic=orders&from_ms=-5", "from_ms=-5: must be >= 0"),
        ("limit=5", "topic='': give a topic"),
    ):  # fmt: skip
        status, answer, _ = http(port, f"/api/pending?{query}")
        assert (status, answer["error"]) == (400, named)
    assert http(port, "/api/timer")[:2] == (
        400, {"error": "id='': give a id", "code": "INVALID_ARGUMENT"},
    )  # fmt: skip


def test_pages_follow_the_api_tokens_in_time_order(console):
    port, client = console
    client.send_batch([Client.request("orders", b"", delay_ms=f"{60 - n}m") for n in range(7)])
    status, first, _ = http(port, "/api/pending?topic=orders&limit=5")
    assert status == 200 and len(first["timers"]) == 5 and first["next_page_token"]
    token = urllib.request.quote(first["next_page_token"])
    _, second, _ = http(port, f"/api/pending?topic=orders&limit=5&page_token={token}")
    times = [t["deliver_at"]["ms"] for t in first["timers"] + second["timers"]]
    assert len(times) == 7 and times == sorted(times) and not second["next_page_token"]
    assert {t["state"] for t in first["timers"]} == {"SCHEDULED"}


def test_timer_fields_state_name_times_and_trace(console):
    port, client = console
    sent = client.send("orders", "ünïcode body", delay_ms="3m", properties={"k": "v"})
    status, answer, _ = http(port, f"/api/timer?id={sent.message_id}")
    assert status == 200
    timer = answer["timer"]
    assert (timer["topic"], timer["state"], timer["wheel"]) == ("orders", "SCHEDULED", "minute")
    assert timer["properties"] == {"k": "v"} and timer["body_preview"] == "ünïcode body"
    assert timer["deliver_at"]["ms"] == sent.deliver_at_ms
    assert timer["deliver_at"]["iso"].endswith("Z") and timer["fired_at"] is None
    assert timer["deliver_at"]["relative"].startswith(("in 2m", "in 3m"))
    assert [e["kind"] for e in timer["trace"]] == ["SENT"]
    assert timer["trace"][0]["what"] == "placed in the minute wheel"


def test_trace_of_a_delivered_and_acked_timer_in_words(console):
    port, client = console
    sent = client.send("orders", b"", delay_ms=0)
    with client.subscribe("orders", consumer="billing-worker-1") as stream:
        batch = next(iter(stream))
        assert [d.message_id for d in batch] == [sent.message_id]
        client.ack("orders", [sent.message_id])
    _, answer, _ = http(port, f"/api/timer?id={sent.message_id}")
    timer = answer["timer"]
    assert timer["state"] == "ACKED" and timer["attempts"] == 1
    assert timer["acked_at"]["relative"].endswith(("ago", "now"))
    events = {e["kind"]: e for e in timer["trace"]}
    assert list(events) == ["SENT", "FIRED", "DELIVERED", "ACKED"]
    assert events["DELIVERED"]["what"] == "attempt 1 to billing-worker-1"
    assert events["DELIVERED"]["subscriber"] == "billing-worker-1"
    times = [e["at"]["ms"] for e in timer["trace"]]
    assert times == sorted(times) and all(e["at"]["iso"].endswith("Z") for e in timer["trace"])


def test_cancel_needs_json_then_cancels_and_says_why_it_cannot(console):
    port, client = console
    sent = client.send("orders", b"", delay_ms="5m")
    form = {"Content-Type": "application/x-www-form-urlencoded"}
    status, answer, _ = http(
        port, "/api/cancel", body={"message_id": sent.message_id}, headers=form
    )
    assert status == 400 and "Content-Type: application/json" in answer["error"]
    assert client.get(sent.message_id).state is State.SCHEDULED  # a cross-site form cannot

    status, answer, _ = http(
        port, "/api/cancel", body={"message_id": sent.message_id}, headers=JSON
    )
    assert status == 200 and answer["timer"]["state"] == "CANCELLED"
    assert [e["kind"] for e in answer["timer"]["trace"]] == ["SENT", "CANCELLED"]
    assert client.get(sent.message_id).state is State.CANCELLED

    fired = client.send("orders", b"", delay_ms=0)
    status, answer, _ = http(
        port, "/api/cancel", body={"message_id": fired.message_id}, headers=JSON
    )
    assert status == 409 and answer["code"] == "FAILED_PRECONDITION"
    status, answer, _ = http(port, "/api/cancel", body={"message_id": 7}, headers=JSON)
    assert (status, answer["error"]) == (400, "message_id=7: give the id of the timer to cancel")


def test_topics_due_per_minute_and_lateness(console):
    port, client = console
    now_ms = client.stats().now_ms
    first_ms = now_ms - now_ms % MINUTE_MS
    for minute, count in ((1, 2), (4, 1), (59, 3)):
        at_ms = first_ms + minute * MINUTE_MS + 30_000
        client.send_batch(
            [Client.request("orders", b"", deliver_at_ms=at_ms) for _ in range(count)]
        )
    client.send("orders", b"", deliver_at_ms=first_ms + 61 * MINUTE_MS)  # beyond the hour
    client.send("alerts", b"", delay_ms=0)

    _, answer, _ = http(port, "/api/topics")
    assert answer["topics"] == [
        {"topic": "alerts", "pending": 0, "fired_unacked": 1},
        {"topic": "orders", "pending": 7, "fired_unacked": 0},
    ]
    # A page at a time: the view shows the first and says how many there are.
    _, first, _ = http(port, "/api/topics?limit=1")
    assert [t["topic"] for t in first["topics"]] == ["alerts"]
    assert (first["next_page_token"], first["total"]) == ("alerts", 2)
    _, rest, _ = http(port, "/api/topics?limit=1&page_token=alerts")
    assert [t["topic"] for t in rest["topics"]] == ["orders"] and rest["next_page_token"] == ""
    assert http(port, "/api/topics?limit=1001")[0] == 400
    _, due, _ = http(port, "/api/due?topic=orders")
    minutes = due["minutes"]
    assert len(minutes) == 60 and minutes[0]["minute"]["ms"] <= due["now"]["ms"]
    by_minute = {(m["minute"]["ms"] - first_ms) // MINUTE_MS: m["count"] for m in minutes}
    shift = (minutes[0]["minute"]["ms"] - first_ms) // MINUTE_MS  # 1 if a minute turned
    expected = {1: 2, 4: 1, 59: 3, 60: 0}
    assert {k: v for k, v in by_minute.items() if v} == {
        k: v for k, v in expected.items() if v and shift <= k < shift + 60
    }

    _, lateness, _ = http(port, "/api/lateness")
    assert sum(m["fires"] for m in lateness["minutes"]) == 1
    assert all(m["p50_ms"] <= m["p99_ms"] <= m["max_ms"] for m in lateness["minutes"])


def test_foreign_host_headers_are_refused_and_answers_carry_a_csp(console):
    port, _ = console
    status, _, headers = http(port, "/api/topics")
    assert status == 200 and "default-src 'self'" in headers["Content-Security-Policy"]
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/api/topics", headers={"Host": "evil.example"}
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=WAIT_S)
    assert refused.value.code == 400
    with urllib.request.urlopen(f"http://localhost:{port}/", timeout=WAIT_S) as page:
        assert b"timerwheel console" in page.read()


def test_with_auth_the_api_decides(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    port = make_server(security=security, console_port=0).console.port

    status, answer, _ = http(port, "/api/topics")
    assert (status, answer["code"]) == (401, "UNAUTHENTICATED")
    assert "no bearer token" in answer["error"]
    status, answer, _ = http(port, "/api/topics", headers={"Authorization": "Bearer wrong"})
    assert status == 401
    consumer = {"Authorization": f"Bearer {tokens['consumer']}"}
    status, answer, _ = http(port, "/api/topics", headers=consumer)
    assert (status, answer["code"]) == (403, "PERMISSION_DENIED")
    assert "role consumer" in answer["error"]
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    assert http(port, "/api/topics", headers=admin)[:2] == (
        200, {"topics": [], "next_page_token": "", "total": 0}
    )  # fmt: skip
    producer = {"Authorization": f"Bearer {tokens['orders-producer']}"}
    assert http(port, "/api/pending?topic=orders.eu", headers=producer)[0] == 200
    assert http(port, "/api/pending?topic=billing", headers=producer)[0] == 403


def test_console_settings_are_checked_before_anything_starts(make_server, tmp_path):
    with pytest.raises(SettingsError, match=r"console_port=70000: must be -1 \(off\)"):
        Settings(console_port=70000)
    with pytest.raises(SettingsError, match="console_port=7070: is the port too"):
        Settings(console_port=7070)
    with pytest.raises(SettingsError, match=r"console_host='0\.0\.0\.0': not a loopback"):
        make_server(console_port=0, console_host="0.0.0.0")
    assert not (tmp_path / "data").exists()  # nothing was opened
    server = make_server(console_port=0, console_host="0.0.0.0", security=SecuritySettings(
        insecure=True
    ))  # fmt: skip
    assert http(server.console.port, "/api/topics")[0] == 200


def test_api_target_dials_loopback_for_a_wildcard_host():
    assert api_target("0.0.0.0", 7070) == "127.0.0.1:7070"
    assert api_target("::", 7070) == "[::1]:7070"
    assert api_target("127.0.0.1", 7) == "127.0.0.1:7"
    assert api_target("::1", 7) == "[::1]:7"


def test_relative_times_read_like_a_person_says_them():
    assert relative(200_000) == "in 3m 20s"
    assert relative(-200_000) == "3m 20s ago"
    assert relative(3_605_000) == "in 1h"  # two units at most: the seconds are dropped
    assert relative(90_061_000) == "in 1d 1h"
    assert relative(450) == "in 450 ms" and relative(0) == "now"


@pytest.mark.system  # spawned `timerwheel serve`, one with --workers 2
@pytest.mark.parametrize("workers", [0, 2])
def test_serve_writes_the_console_port_file(serve_process, tmp_path, workers):
    port_file = Path(tmp_path / "console.port")
    flags = ["--console-port", "0", "--console-port-file", str(port_file)]
    server = serve_process(tmp_path / "data", *flags, "--workers", str(workers))
    port = server.wait_event("console_serving")["port"]
    deadline = time.monotonic() + WAIT_S  # written just after server_started
    while not port_file.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert int(port_file.read_text()) == port
    with server.client() as client:
        sent = client.send("orders", b"", delay_ms="10m")
    status, answer, _ = http(port, f"/api/timer?id={sent.message_id}")
    assert status == 200 and answer["timer"]["state"] == "SCHEDULED"
    assert http(port, "/api/topics")[1]["topics"] == [
        {"topic": "orders", "pending": 1, "fired_unacked": 0}
    ]
