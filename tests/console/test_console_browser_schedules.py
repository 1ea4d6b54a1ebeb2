"""Pausing and resuming a series from the web console, in a real headless Chromium
(Playwright, Debian's `chromium`) against a real server: clicks, not only loads, and the
API's roles deciding (a consumer token cannot pause)."""

from __future__ import annotations

import pytest
from helpers.console_page import chromium_page
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S
from playwright.sync_api import expect

from timerwheel import Client
from timerwheel.security.settings import SecuritySettings
from timerwheel.v1 import timerwheel_pb2 as pb

pytestmark = [pytest.mark.system, pytest.mark.wallclock]  # system: a headless Chromium

HOUR_MS = 3_600_000


def _look_up(page, message_id: str) -> None:
    """Look `message_id` up and wait until the page shows it: the view of the timer looked
    up before stays visible until the new answer is drawn."""
    page.fill("#lookup-id", message_id)
    page.click("#lookup-form button")
    page.wait_for_selector("#timer:not([hidden])")
    expect(page.locator("#cancel-id")).to_have_text(message_id)


def test_pause_and_resume_a_series_in_the_browser(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="nightly",
                    repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
        client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="once")
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            _look_up(page, "once")  # a one-shot timer: nothing to pause
            assert page.is_hidden("#pause-button") and page.is_hidden("#resume-button")

            _look_up(page, "nightly")
            assert page.is_visible("#pause-button") and page.is_hidden("#resume-button")
            page.click("#pause-button")
            expect(page.locator("#resume-button")).to_be_visible()
            assert page.is_hidden("#pause-button")
            expect(page.locator('#timer-fields td[data-field="paused"]')).to_contain_text("yes")
            assert "PAUSED" in page.inner_text("#trace tbody")
            assert client.get("nightly").paused

            page.click("#resume-button")
            expect(page.locator("#pause-button")).to_be_visible()
            assert page.locator('#timer-fields td[data-field="paused"]').count() == 0
            assert "RESUMED" in page.inner_text("#trace tbody")
            assert not client.get("nightly").paused


def test_a_consumer_token_cannot_pause_in_the_browser(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, console_port=0)
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as client:
        client.send("jobs", b"x", delay_ms=HOUR_MS, message_id="nightly",
                    repeat=pb.Repeat(every_ms=HOUR_MS))  # fmt: skip
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.wait_for_selector("#auth:not([hidden])")
            page.fill("#token-input", tokens["consumer"])  # Get is a consumer's; pausing not
            page.click("#token-form button")
            _look_up(page, "nightly")
            page.click("#pause-button")
            expect(page.locator("#lookup-error")).to_contain_text("role consumer")
            assert not client.get("nightly").paused
