"""The web console driven in a real headless Chromium (Playwright, Debian's `chromium`)
against a real server with the console on a free loopback port (docs/console.md)."""

from __future__ import annotations

import re

import pytest
from helpers.console_page import (
    BILLING_PER_MINUTE,
    ORDER_MINUTES,
    PAGE_LIMIT,
    chromium_page,
    send_samples,
)
from helpers.credentials import write_tokens
from helpers.waits import WAIT_S
from playwright.sync_api import expect

from timerwheel import Client, State
from timerwheel.security.settings import SecuritySettings

pytestmark = [pytest.mark.system, pytest.mark.wallclock]  # system: a headless Chromium

REFRESH_MS = 5000  # console.js
ISO_UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def _field(page, name: str) -> str:
    return page.inner_text(f'#timer-fields td[data-field="{name}"]')


def _due_values(page) -> list[int]:
    """The due chart's bar values, sorted, read in one step (a refresh may redraw it)."""
    values = page.eval_on_selector_all(
        "#due-chart .ct-bar", "bars => bars.map(b => b.getAttribute('ct:value'))"
    )
    return sorted(int(v) for v in values)


def test_look_up_cancel_and_charts_in_the_browser(make_server):
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        ids = send_samples(client, client.stats().now_ms)
        client.send_batch([Client.request("paged", b"", delay_ms="1h") for _ in range(25)])
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")

            # topics with their backlog
            page.wait_for_selector("#topics tbody tr")
            rows = page.eval_on_selector_all(
                "#topics tbody tr", "rows => rows.map(r => [...r.cells].map(c => c.textContent))"
            )
            assert ["orders", str(len(ORDER_MINUTES)), "0"] in rows
            billing = str(sum(BILLING_PER_MINUTE.values()))
            assert ["billing", billing, "0"] in rows and ["paged", "25", "0"] in rows

            # the due chart of "orders": one bar per minute that holds its timers
            page.click("#topics a:text-is('orders')")
            expect(page.locator("#due-topic")).to_have_text("orders")
            expect(page.locator("#due-total")).to_have_text(str(len(ORDER_MINUTES)))
            bars = page.locator("#due-chart .ct-bar")
            expect(bars).to_have_count(len(set(ORDER_MINUTES)))
            assert _due_values(page) == [1, 1, 1, 2]  # minute 5 holds two

            # fire lateness: the two alerts fired at once; P50, P99 and max per minute
            page.wait_for_selector("#lateness-chart .ct-point", state="attached")
            assert page.locator("#lateness-chart .ct-series").count() == 3
            points = page.locator("#lateness-chart .ct-point").count()
            assert points >= 3 and points % 3 == 0  # a minute (two if one turned meanwhile)

            # look a timer up by id: fields, state as a name, times as ISO UTC and relative
            page.fill("#lookup-id", ids[0])
            page.click("#lookup-form button")
            page.wait_for_selector("#timer:not([hidden])")
            assert _field(page, "state") == "SCHEDULED"
            assert _field(page, "topic") == "orders"
            assert _field(page, "properties") == "customer=c-0"
            due = _field(page, "deliver at")
            assert ISO_UTC.search(due) and re.search(r"\(in \d+m( \d+s)?\)", due), due
            trace = page.inner_text("#trace tbody")
            assert "SENT" in trace and "placed in the minute wheel" in trace

            # cancel, through the confirmation
            page.click("#cancel-button")
            assert page.is_visible("#cancel-confirm")
            page.click("#cancel-no")  # changed our mind: nothing happens
            assert page.is_visible("#cancel-button")
            assert client.get(ids[0]).state is State.SCHEDULED
            page.click("#cancel-button")
            page.click("#cancel-yes")
            expect(page.locator('#timer-fields td[data-field="state"]')).to_have_text("CANCELLED")
            assert "CANCELLED" in page.inner_text("#trace tbody")
            assert page.is_hidden("#cancel-button")
            assert client.get(ids[0]).state is State.CANCELLED

            # an unknown id: the API's message
            page.fill("#lookup-id", "no-such-id")
            page.click("#lookup-form button")
            expect(page.locator("#lookup-error")).to_have_text(
                "message_id='no-such-id': no such timer"
            )

            # pending timers of a topic by time, with paging
            page.fill("#pending-topic-input", "paged")
            page.click("#pending-form button")
            expect(page.locator("#pending tbody tr")).to_have_count(PAGE_LIMIT)
            first_page = page.eval_on_selector_all(
                "#pending tbody tr", "rows => rows.map(r => r.cells[1].textContent)"
            )
            assert first_page == sorted(first_page)
            page.click("#pending-next")
            expect(page.locator("#pending tbody tr")).to_have_count(25 - PAGE_LIMIT)
            assert page.inner_text("#pending-page").startswith("page 2")


def test_an_answer_for_the_topic_shown_before_is_never_drawn(make_server):
    """The page opens on the busiest topic (billing); its due request is held unanswered,
    as a slow or late answer would be. Choosing orders aborts it (the browser reports the
    request failed), so the chart shows orders and billing's answer can never replace it."""
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        send_samples(client, client.stats().now_ms)
    held = []

    def hold_billing(route):
        if "topic=billing" in route.request.url:
            held.append(route)
        else:
            route.continue_()

    with chromium_page() as page:
        page.route("**/api/due?*", hold_billing)
        page.goto(f"http://127.0.0.1:{server.console.port}/")
        expect(page.locator("#pending-topic")).to_have_text("billing")
        stale = lambda request: "/api/due?topic=billing" in request.url  # noqa: E731
        with page.expect_event("requestfailed", stale):
            page.click("#topics a:text-is('orders')")
        assert held, "billing's due request was never made"
        expect(page.locator("#due-topic")).to_have_text("orders")
        expect(page.locator("#due-chart .ct-bar")).to_have_count(len(set(ORDER_MINUTES)))
        assert _due_values(page) == [1, 1, 1, 2]


def test_a_cancel_is_not_drawn_over_by_a_look_up_sent_before_it(make_server):
    """A look-up of the shown timer is held unanswered; the cancel made meanwhile aborts it,
    so the page keeps showing CANCELLED (the look-up's SCHEDULED would have come later)."""
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        message_id = client.send("orders", b"x", delay_ms="10m").message_id
        with chromium_page() as page:
            page.goto(f"http://127.0.0.1:{server.console.port}/")
            page.fill("#lookup-id", message_id)
            page.click("#lookup-form button")
            page.wait_for_selector("#timer:not([hidden])")
            held = []
            page.route("**/api/timer?*", lambda route: held.append(route))
            page.click("#lookup-form button")  # the same timer again: held
            page.click("#cancel-button")
            look_up = lambda request: "/api/timer?" in request.url  # noqa: E731
            with page.expect_event("requestfailed", look_up):
                page.click("#cancel-yes")
            assert len(held) == 1
            expect(page.locator('#timer-fields td[data-field="state"]')).to_have_text("CANCELLED")
            assert client.get(message_id).state is State.CANCELLED


def test_the_periodic_refresh_leaves_a_slow_panels_request_running(make_server):
    """A due request held past two refresh periods is neither aborted nor repeated (a
    server slower than the period still gets the chart drawn), while the answered panels
    reload on each tick. The page's clock is Playwright's, moved on by hand."""
    server = make_server(console_port=0)
    with Client(server.target, timeout_s=WAIT_S) as client:
        send_samples(client, client.stats().now_ms)
    held, failed = [], []
    with chromium_page() as page:
        page.clock.install()
        page.route("**/api/due?*", lambda route: held.append(route))
        page.on("requestfailed", lambda request: failed.append(request.url))
        page.goto(f"http://127.0.0.1:{server.console.port}/")
        expect(page.locator("#pending-topic")).to_have_text("billing")
        for _ in range(2):
            # Every other panel has its answer (console.js's own record of requests in
            # flight), so the tick reloads them; pending is the last it loads, after the
            # place of due's request.
            page.wait_for_function("() => Object.keys(inFlight).join() === 'due'")
            with page.expect_request(lambda r: "/api/pending?" in r.url):
                page.clock.run_for(REFRESH_MS)
        assert len(held) == 1 and failed == []
        held[0].continue_()
        expect(page.locator("#due-topic")).to_have_text("billing")


def test_with_auth_the_page_asks_for_a_token_and_an_admin_token_works(make_server, tmp_path):
    tokens = write_tokens(tmp_path / "tokens.toml")
    security = SecuritySettings(auth_tokens_file=str(tmp_path / "tokens.toml"))
    server = make_server(security=security, console_port=0)
    with Client(server.target, timeout_s=WAIT_S, token=tokens["admin"]) as client:
        sent = client.send("orders", b"hello", delay_ms="10m")
    with chromium_page() as page:
        page.goto(f"http://127.0.0.1:{server.console.port}/")
        page.wait_for_selector("#auth:not([hidden])")
        refused = page.inner_text("#auth-message")
        assert "no bearer token" in refused, refused
        assert page.locator("#topics tbody tr").count() == 0

        # a consumer token is not enough for the topics: the API's PERMISSION_DENIED
        page.fill("#token-input", tokens["consumer"])
        page.click("#token-form button")
        expect(page.locator("#topics-error")).to_contain_text("role consumer")

        page.click("#forget-token")
        page.fill("#token-input", tokens["admin"])
        page.click("#token-form button")
        page.wait_for_selector("#topics tbody tr")
        assert page.inner_text("#topics tbody td:first-child") == "orders"

        page.fill("#lookup-id", sent.message_id)
        page.click("#lookup-form button")
        page.wait_for_selector("#timer:not([hidden])")
        assert _field(page, "state") == "SCHEDULED"
        assert page.evaluate("sessionStorage.length") == 1
