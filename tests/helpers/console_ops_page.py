"""Screenshots of the console's operator views for docs/console.md, from the real page:

    python -m tests.helpers.console_ops_page docs/console-inflight.png \
        docs/console-consumers.png docs/console-search.png docs/console-throughput.png \
        docs/console-fire-now.png

A server with the console on free loopback ports over a temporary data dir; two named
consumers that never ack hold some of "billing"'s fired messages (the rest wait for
room), a sender and a consumer that acks keep the throughput chart moving, a search
finds "orders" timers by prefix and property, and a looked-up timer asks to confirm a
fire now.
"""

from __future__ import annotations

import sys
import tempfile
import threading

from playwright.sync_api import expect

from tests.helpers.console_page import chromium_page
from timerwheel import Client

WAIT_MS = 20_000


def _hold(client: Client, topic: str, consumer: str, stop: threading.Event) -> threading.Thread:
    subscription = client.subscribe(topic, max_in_flight=3, consumer=consumer)

    def run() -> None:
        for _ in subscription:
            if stop.is_set():
                return

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    stop_cancel = threading.Thread(target=lambda: (stop.wait(), subscription.cancel()), daemon=True)
    stop_cancel.start()
    return thread


def take_screenshots(inflight: str, consumers: str, search: str, throughput: str, fire: str):
    from timerwheel.server.app import TimerServer
    from timerwheel.wheels.settings import Settings

    with tempfile.TemporaryDirectory() as data_dir:
        settings = Settings(
            data_dir=data_dir, port=0, console_port=0, sync_writes=False, ack_timeout_ms=300_000
        )
        stop = threading.Event()
        with TimerServer(settings) as server, Client(server.target) as client:
            now = client.stats().now_ms
            client.send_batch([Client.request("billing", b"invoice", delay_ms=0) for _ in range(9)])
            client.send_batch([
                Client.request(
                    "orders", b"{}", deliver_at_ms=now + 600_000 + n * 45_000,
                    message_id=f"order-{1000 + n}",
                    properties={"region": "eu" if n % 3 else "us", "tier": "gold"},
                )
                for n in range(12)
            ])  # fmt: skip
            client.send("audit", b"x", delay_ms=0)
            threads = [_hold(client, "billing", f"billing-worker-{n}", stop) for n in (1, 2)]

            def send() -> None:  # some for later, some due at once (fired, then acked)
                while not stop.wait(0.01):
                    client.send("load", b"x", delay_ms="1h")
                    client.send("flow", b"x", delay_ms=0)

            def consume() -> None:
                with client.subscribe("flow", consumer="flow-worker") as stream:
                    for batch in stream:
                        client.ack("flow", [d.message_id for d in batch])
                        if stop.is_set():
                            return

            threads.append(threading.Thread(target=consume, daemon=True))
            threads[-1].start()

            sender = threading.Thread(target=send, daemon=True)
            sender.start()
            try:
                with chromium_page(height=900) as page:
                    page.goto(f"http://127.0.0.1:{server.console.port}/")
                    page.click("#topics a:text-is('billing')")
                    held = page.locator("#inflight tbody tr", has_text="billing-worker")
                    expect(held).to_have_count(6, timeout=WAIT_MS)
                    page.locator("#inflight-section").screenshot(path=inflight)
                    expect(page.locator("#consumers tbody tr")).to_have_count(3, timeout=WAIT_MS)
                    page.locator("#consumers-section").screenshot(path=consumers)

                    page.fill("#search-topic", "orders")
                    page.fill("#search-prefix", "order-10")
                    page.fill("#search-property", "region=eu")
                    page.click("#search-form button")
                    expect(page.locator("#search-results tbody tr")).to_have_count(
                        8, timeout=WAIT_MS
                    )
                    page.locator("#search-section").screenshot(path=search)

                    lines = page.locator("#throughput-chart polyline.sends")
                    page.wait_for_timeout(12_000)  # a screenshot, not a test: a few polls
                    expect(lines).not_to_have_attribute("data-latest", "0.00")
                    page.locator("#throughput-section").screenshot(path=throughput)

                    page.fill("#lookup-id", "order-1004")
                    page.click("#lookup-form button")
                    page.fill("#reschedule-when", "30m")
                    page.click("#fire-button")
                    expect(page.locator("#move-confirm")).to_be_visible()
                    page.locator("#lookup").screenshot(path=fire)
            finally:
                stop.set()
                sender.join(5)
                for thread in threads:
                    thread.join(5)


if __name__ == "__main__":
    take_screenshots(*sys.argv[1:6])
