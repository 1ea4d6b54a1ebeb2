"""The web console in a real headless Chromium: shared by tests/console/test_console_browser.py and
the README's screenshot (docs/console.png), which this module takes when run:

    python -m tests.helpers.console_page docs/console.png [docs/console-purge.png]

It starts a server with the console on free loopback ports over a temporary data dir,
sends the sample timers below, opens the page in Debian's `chromium` (driven by
Playwright, no browser download), looks one timer up and saves the screenshot.
"""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator

from timerwheel import Client

MINUTE_MS = 60_000
# Minutes ahead (of the current one) holding timers of the topic "orders": 4 distinct.
ORDER_MINUTES = (2, 5, 5, 9, 23)
# Minutes ahead -> timers of the topic "billing": the busiest topic, the page's first chart.
BILLING_PER_MINUTE = {m: 1 + (m * 7) % 6 for m in range(3, 58, 2)}
PAGE_LIMIT = 20  # what the page asks per List page (console.js)


@contextlib.contextmanager
def chromium_page(width: int = 1400, height: int = 1100) -> Iterator[object]:
    """A Playwright page in the system Chromium, closed afterwards."""
    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium")
    assert chromium, "the Debian package chromium is needed (.ci/run installs it)"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            page.set_default_timeout(10_000)
            yield page
        finally:
            browser.close()


def send_samples(client: Client, now_ms: int) -> list[str]:
    """Timers of "orders" in ORDER_MINUTES (mid-minute, so a minute never turns under
    them), of "billing" as BILLING_PER_MINUTE, and two "alerts" that fire at once (fire
    lateness).
    Returns the ids of the "orders" timers, in time order."""
    first_ms = now_ms - now_ms % MINUTE_MS
    ids = [
        client.send(
            "orders", f'{{"order": {n}}}', deliver_at_ms=first_ms + m * MINUTE_MS + 30_000,
            properties={"customer": f"c-{n}"},
        ).message_id
        for n, m in enumerate(ORDER_MINUTES)
    ]  # fmt: skip
    client.send_batch([
        Client.request("billing", b"invoice", deliver_at_ms=first_ms + m * MINUTE_MS + 30_000)
        for m, count in BILLING_PER_MINUTE.items() for _ in range(count)
    ])  # fmt: skip
    client.send_batch([Client.request("alerts", b"now", delay_ms=0) for _ in range(2)])
    return ids


def take_screenshot(path: str, purge_path: str = "") -> None:
    """The page with a timer looked up (`path`); with `purge_path`, also the purge and
    redrive panel asking to confirm a purge of "orders"."""
    from timerwheel.server.app import TimerServer
    from timerwheel.wheels.settings import Settings

    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(data_dir=data_dir, port=0, console_port=0, sync_writes=False)
        with TimerServer(settings) as server, Client(server.target) as client:
            ids = send_samples(client, client.stats().now_ms)
            with chromium_page() as page:
                page.goto(f"http://127.0.0.1:{server.console.port}/")
                page.wait_for_selector("#due-chart .ct-bar", state="attached")
                page.fill("#lookup-id", ids[1])
                page.click("#lookup-form button")
                page.wait_for_selector("#trace tbody tr")
                page.screenshot(path=path, full_page=True)
                if purge_path:
                    page.click("#topics a:text-is('orders')")
                    page.click("#purge-button")
                    page.wait_for_selector("#bulk-confirm:not([hidden])")
                    page.locator("#bulk-section").screenshot(path=purge_path)


if __name__ == "__main__":
    take_screenshot(*sys.argv[1:3])
