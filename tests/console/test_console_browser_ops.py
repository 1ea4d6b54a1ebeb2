"""The console's operator views and timer actions in a real headless Chromium against a
real server: in flight with its consumer, consumers and lag, search with pages, the
throughput chart, fire now and reschedule through their confirmation, and roles."""

from __future__ import annotations

import threading

import pytest
from helpers.console_page import chromium_page
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S
from playwright.sync_api import expect

from timerwheel import Client, State
from timerwheel.security.settings import SecuritySettings

pytestmark = [pytest.mark.wallclock, pytest.mark.system]  # a headless Chromium


class Held:
    """A named Subscribe stream that takes messages and never acks them."""

    def __init__(self, client: Client, topic: str, consumer: str) -> None:
        self.subscription = client.subscribe(topic, max_in_flight=10, consumer=consumer)
        self.ids: list[str] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for batch in self.subscription:
            self.ids.extend(d.message_id for d in batch)

    def stop(self) -> None:
        self.subscription.cancel()
        self._thread.join(WAIT_S)


def test_in_flight_consumers_and_lag_in_the_browser(make_server):
    server = make_server(console_port=0, ack_timeout_ms=120_000)
    with Client(server.target, timeout_s=WAIT_S) as client:
        sent = client.send("billing", b"x", delay_ms=0).message_id
        client.send("billing", b"x", delay_ms="1h")
        client.send("unread", b"x", delay_ms=0)
        held = Held(client, "billing", "billing-worker-7")
        try:
            with chromium_page() as page:
                page.goto(f"http://127.0.0.1:{server.console.port}/")
                page.click("#topics a:text-is('billing')")
                row = page.locator("#inflight tbody tr")
                expect(row).to_have_count(1)
                expect(row.locator("td").nth(0)).to_have_text(sent)
                expect(row.locator("td").nth(1)).to_have_text("1")
                expect(row.locator("td").nth(2)).to_have_text("billing-worker-7")
                expect(row.locator("td").nth(4)).to_contain_text("in ")
                expect(page.locator("#inflight-summary")).to_contain_text("1 fired, not acked")

                # Consumers and lag (the 5-second refresh or the first load shows them).
                stream = page.locator("#consumers tbody tr", has_text="billing-worker-7")
                expect(stream).to_have_count(1, timeout=WAIT_S * 1000)
                expect(stream.locator("td").nth(3)).to_have_text("1 / 10")
                lag = page.locator("#lag tbody tr", has_text="billing")
                expect(lag.locator("td").nth(1)).to_have_text("1")  # consumers
                expect(lag.locator("td").nth(3)).to_have_text("1")  # fired, not acked
                expect(lag.locator("td").nth(5)).to_contain_text("ago")
                unread = page.locator("#lag tbody tr", has_text="unread")
                expect(unread.locator("td").nth(1)).to_have_text("0")

                # A click on an in-flight id looks it up.
                row.locator("a").click()
                expect(page.locator("#timer-fields [data-field='state']")).to_have_text("FIRED")

                # A topic nobody reads: nothing held, and the page says why.
                page.click("#topics a:text-is('unread')")
                expect(page.locator("#inflight tbody tr")).to_have_count(0)
                expect(page.locator("#inflight-note")).to_contain_text("no Subscribe stream")
        finally:
            held.stop()


def test_search_by_prefix_property_and_time_with_pages(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        now = client.stats().now_ms
        hour = now - now % 3_600_000 + 2 * 3_600_000
        client.send_batch([
            Client.request(
                "shop", b"x", deliver_at_ms=hour + n * 1000, message_id=f"cart-{n:02}",
                properties={"region": "eu" if n < 25 else "us"},
            )
            for n in range(30)
        ] + [Client.request("shop", b"x", deliver_at_ms=hour, message_id="order-1",
                            properties={"region": "eu"})])  # fmt: skip
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.fill("#search-topic", "shop")
            page.fill("#search-prefix", "cart-")
            page.fill("#search-property", "region=eu")
            page.click("#search-form button")
            rows = page.locator("#search-results tbody tr")
            expect(rows).to_have_count(20)
            expect(rows.first.locator("td").first).to_have_text("cart-00")
            page.click("#search-next")
            expect(rows).to_have_count(5)
            expect(rows.last.locator("td").first).to_have_text("cart-24")
            expect(page.locator("#search-page")).to_contain_text("page 2, 5 timers")
            page.click("#search-first")
            expect(rows).to_have_count(20)

            # A time range (UTC, no zone given): the 10 seconds from cart-10 on.
            start = hour + 10_000
            from_iso = _iso(start)
            page.fill("#search-from", from_iso)
            page.fill("#search-to", _iso(start + 10_000))
            page.fill("#search-property", "")
            page.click("#search-form button")
            expect(rows).to_have_count(10)
            expect(rows.first.locator("td").first).to_have_text("cart-10")

            page.fill("#search-from", "yesterday")
            page.click("#search-form button")
            expect(page.locator("#search-error")).to_contain_text('from: "yesterday" is not a time')


def _iso(epoch_ms: int) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(epoch_ms / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S")


def test_the_throughput_chart_draws_what_happens(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client, chromium_page() as page:
        page.goto(f"http://127.0.0.1:{server.console.port}/")
        lines = page.locator("#throughput-chart polyline")
        expect(lines).to_have_count(3)  # two polls: a first rate, all zero
        expect(page.locator("#throughput-chart polyline.sends")).to_have_attribute(
            "data-latest", "0.00"
        )
        # Sends while the page polls: a poll interval shows a rate above zero.
        stop = threading.Event()

        def send() -> None:
            while not stop.is_set():
                client.send("busy", b"x", delay_ms="1h")

        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        try:
            expect(page.locator("#throughput-chart polyline.sends")).not_to_have_attribute(
                "data-latest", "0.00", timeout=WAIT_S * 1000
            )
        finally:
            stop.set()
            sender.join(WAIT_S)
        expect(page.locator("#throughput-latest")).to_contain_text("sends ")
        fires = page.locator("#throughput-chart polyline.fires")
        assert fires.get_attribute("data-latest") == "0.00"  # nothing was due


def test_fire_now_and_reschedule_through_their_confirmation(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        timer = client.send("jobs", b"x", delay_ms="1h")
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.fill("#lookup-id", timer.message_id)
            page.click("#lookup-form button")
            expect(page.locator("#fire-button")).to_be_visible()

            # Reschedule: "No" first changes nothing, then "Yes" moves it.
            page.fill("#reschedule-when", "3h")
            page.click("#reschedule-button")
            expect(page.locator("#move-question")).to_have_text(f"Move {timer.message_id} to 3h?")
            page.click("#move-no")
            assert page.is_hidden("#move-confirm")
            assert client.get(timer.message_id).deliver_at_ms == timer.deliver_at_ms
            page.click("#reschedule-button")
            page.click("#move-yes")
            expect(page.locator("#trace tbody tr").last).to_contain_text("RESCHEDULED")
            moved = client.get(timer.message_id).deliver_at_ms
            assert moved - timer.deliver_at_ms > 100 * 60_000  # about two hours later

            # Fire now, through its confirmation: it fires at once.
            page.click("#fire-button")
            expect(page.locator("#move-question")).to_contain_text("delivered at once")
            page.click("#move-yes")
            expect(page.locator("#trace tbody tr", has_text="RESCHEDULED")).to_have_count(2)
            _wait_state(client, timer.message_id, State.FIRED)
            page.click("#lookup-form button")
            expect(page.locator("#timer-fields [data-field='state']")).to_have_text("FIRED")
            assert page.is_hidden("#fire-button") and page.is_hidden("#reschedule-box")


def _wait_state(client: Client, message_id: str, wanted: State) -> None:
    import time

    until = time.monotonic() + WAIT_S
    while client.get(message_id).state is not wanted:
        assert time.monotonic() < until, f"{message_id} never became {wanted.name}"
        time.sleep(0.02)


def test_a_consumer_token_cannot_fire_now_or_reschedule(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, console_port=0)
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as client:
        timer = client.send("orders", b"x", delay_ms="1h")
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.wait_for_selector("#auth:not([hidden])")
            page.fill("#token-input", tokens["consumer"])
            page.click("#token-form button")
            page.fill("#lookup-id", timer.message_id)
            page.click("#lookup-form button")  # a consumer may look a timer up
            expect(page.locator("#timer-fields [data-field='state']")).to_have_text("SCHEDULED")

            page.click("#fire-button")
            page.click("#move-yes")
            expect(page.locator("#lookup-error")).to_contain_text("Reschedule is not allowed")
            expect(page.locator("#lookup-error")).to_contain_text("role consumer")
            page.fill("#reschedule-when", "5m")
            page.click("#reschedule-button")
            page.click("#move-yes")
            expect(page.locator("#lookup-error")).to_contain_text("role consumer")
            kept = client.get(timer.message_id)
            assert (kept.state, kept.deliver_at_ms) == (State.SCHEDULED, timer.deliver_at_ms)
            # Nor may it see who consumes what.
            page.click("#topics-section")  # nothing to click: the views say it
            expect(page.locator("#consumers-error")).to_contain_text("role consumer")

            page.click("#forget-token")
            page.fill("#token-input", tokens["admin"])
            page.click("#token-form button")
            page.click("#lookup-form button")
            page.click("#fire-button")
            page.click("#move-yes")
            _wait_state(client, timer.message_id, State.FIRED)
