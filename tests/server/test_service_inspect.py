"""What an operator inspects over gRPC (the console's newer views): TimerAdmin.InFlight and
Consumers, List's search fields, and Stats' throughput counters, against a real server."""

from __future__ import annotations

import threading
import time

import grpc
import pytest
from helpers.waits import WAIT_S

from timerwheel import Client, RemoteError

pytestmark = pytest.mark.wallclock


def eventually(probe, timeout_s: float = WAIT_S):
    """`probe()` once it is truthy, polled until `timeout_s` (then the assertion fails)."""
    until = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value or time.monotonic() > until:
            assert value, "condition not met in time"
            return value
        time.sleep(0.02)


class Held:
    """A Subscribe stream named `consumer` that takes messages and never acks them."""

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


@pytest.fixture
def held():
    made: list[Held] = []
    yield lambda *args: made.append(Held(*args)) or made[-1]
    for stream in made:
        stream.stop()


def test_in_flight_names_the_consumer_and_attempt_of_each_message(make_server, held):
    server = make_server(ack_timeout_ms=60_000)
    with Client(server.target, timeout_s=WAIT_S) as client:
        first = client.send("billing", b"x", delay_ms=0).message_id
        stream = held(client, "billing", "billing-worker-1")
        eventually(lambda: stream.ids == [first])

        answer = client.in_flight("billing")
        assert [m.message_id for m in answer.messages] == [first]
        message = answer.messages[0]
        assert (message.in_flight, message.attempt, message.consumer) == (
            True, 1, "billing-worker-1",
        )  # fmt: skip
        assert 0 < message.ack_due_in_ms <= 60_000
        assert message.fired_at_ms >= message.deliver_at_ms > 0
        assert (answer.fired_unacked, answer.tracked, answer.untracked_reason) == (1, 1, "")

        # A topic nobody reads: the hub holds none of it, and the answer says why.
        client.send("idle", b"x", delay_ms=0)
        answer = eventually(lambda: (a := client.in_flight("idle")).fired_unacked == 1 and a)
        assert list(answer.messages) == [] and answer.tracked == 0
        assert "no Subscribe stream" in answer.untracked_reason

        # The message goes back when its stream ends: waiting, no consumer, next attempt.
        stream.stop()
        answer = eventually(
            lambda: (
                (a := client.in_flight("billing")).messages and not a.messages[0].in_flight and a
            )
        )
        assert (answer.messages[0].consumer, answer.messages[0].attempt) == ("", 2)


def test_consumers_and_lag(make_server, held):
    server = make_server(ack_timeout_ms=60_000)
    with Client(server.target, timeout_s=WAIT_S) as client:
        sent = client.send("orders", b"x", delay_ms=0).message_id
        client.send("orders", b"x", delay_ms="1h")
        stream = held(client, "orders", "orders-a")
        held(client, "orders", "orders-b")
        eventually(lambda: sent in stream.ids or len(client.consumers("orders").consumers) == 2)
        answer = eventually(
            lambda: (a := client.consumers("orders")).lag and a.lag[0].in_flight == 1 and a
        )
        names = sorted(c.consumer for c in answer.consumers)
        assert names == ["orders-a", "orders-b"]
        assert sum(c.in_flight for c in answer.consumers) == 1
        assert {c.max_in_flight for c in answer.consumers} == {10}
        [lag] = answer.lag
        assert (lag.topic, lag.consumers, lag.pending, lag.fired_unacked) == ("orders", 2, 1, 1)
        fired_at = client.get(sent).fired_at_ms
        assert lag.oldest_unacked_fired_at_ms == fired_at

        # Every topic: one with a backlog and no consumer is there too, with its lag.
        client.send("nobody", b"x", delay_ms=0)
        every = eventually(
            lambda: (a := client.consumers()) and any(t.topic == "nobody" for t in a.lag) and a
        )
        nobody = next(t for t in every.lag if t.topic == "nobody")
        assert nobody.consumers == 0 and nobody.oldest_unacked_fired_at_ms > 0


def test_search_by_id_prefix_properties_and_time_in_pages(make_server):
    server = make_server()
    with Client(server.target, timeout_s=WAIT_S) as client:
        now = client.stats().now_ms
        for n in range(6):
            client.send(
                "shop", b"x", deliver_at_ms=now + 3_600_000 + n * 60_000,
                message_id=f"{'cart' if n % 2 else 'order'}-{n}",
                properties={"region": "eu" if n < 3 else "us"},
            )  # fmt: skip

        def ids(**search):
            return [t.message_id for t in client.list("shop", **search)[0]]

        assert ids(id_prefix="cart-") == ["cart-1", "cart-3", "cart-5"]
        assert ids(properties={"region": "us"}) == ["cart-3", "order-4", "cart-5"]
        assert ids(id_prefix="cart-", properties={"region": "eu"}) == ["cart-1"]
        assert ids(properties={"region": "asia"}) == []
        window = {"from_ms": now + 3_600_000 + 60_000, "to_ms": now + 3_600_000 + 4 * 60_000}
        assert ids(id_prefix="order-", **window) == ["order-2"]

        # Pages: a limit of 1 walks every match once, in order, by the tokens.
        seen, token = [], ""
        while True:
            page, token = client.list("shop", limit=1, page_token=token, id_prefix="order-")
            seen += [t.message_id for t in page]
            if not token:
                break
        assert seen == ["order-0", "order-2", "order-4"]


def test_bad_arguments_name_the_field(make_server):
    server = make_server()
    with Client(server.target, timeout_s=WAIT_S) as client:
        for call, field in [
            (lambda: client.in_flight(""), "topic=''"),
            (lambda: client.in_flight("a", limit=5000), "limit=5000"),
            (lambda: client.in_flight("a b"), "topic='a b'"),
            (lambda: client.consumers("a b"), "topic='a b'"),
            (lambda: client.list("a", id_prefix="x" * 300), "id_prefix="),
            (lambda: client.list("a", properties={"": "v"}), "properties="),
        ]:
            with pytest.raises(RemoteError) as caught:
                call()
            assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT
            assert caught.value.details.startswith(field), caught.value.details


def test_stats_counts_sends_fires_and_acks(make_server):
    server = make_server()
    with Client(server.target, timeout_s=WAIT_S) as client:
        before = client.stats()
        ids = [client.send("counted", b"x", delay_ms=0).message_id for _ in range(3)]
        client.send("counted", b"x", delay_ms="1h")
        with client.subscribe("counted") as subscription:
            got: list[str] = []
            for batch in subscription:
                got += [d.message_id for d in batch]
                if len(got) >= 2:
                    break
        acked = client.ack("counted", got[:2])
        assert acked == 2
        after = eventually(
            lambda: (s := client.stats()).fires_total - before.fires_total == 3 and s
        )
        assert after.sends_total - before.sends_total == 4
        assert after.acks_total - before.acks_total == 2
        assert set(got[:2]) <= set(ids)
