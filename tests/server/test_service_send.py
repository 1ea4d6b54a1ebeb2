"""TimerService end to end over real gRPC on 127.0.0.1 port 0: send (each time form) and
receive on Subscribe on time, cancel, Get in every state, List paging, idempotent resend."""

from __future__ import annotations

import grpc
import pytest
from helpers.calls import status_of
from helpers.streams import Collector
from helpers.time_of_day import wall_ms

from timerwheel.client import TimerClient
from timerwheel.common import State
from timerwheel.wheels.settings import HOUR_MS, Settings

pytestmark = pytest.mark.wallclock

FIRE_BOUND_MS = 500  # fired_at - deliver_at
ARRIVAL_BOUND_MS = 1_000  # arrival at the subscriber - deliver_at


def test_each_time_form_is_delivered_not_before_its_time_and_soon_after(client, collectors):
    collector = Collector(client, "orders")
    collectors.append(collector)
    before = wall_ms()
    sent = {
        "delay_ms": client.send("orders", b"d", delay_ms=800, properties={"k": "v"}),
        "deliver_at_ms": client.send("orders", b"a", deliver_at_ms=before + 900),
        "delay_level": client.send("orders", b"l", delay_level=1),  # RocketMQ 4 level 1 = 1 s
        "past": client.send("orders", b"p", deliver_at_ms=before - 5_000),
        "zero_delay": client.send("orders", b"z", delay_ms=0),
    }
    after = wall_ms()
    assert before + 800 <= sent["delay_ms"].deliver_at_ms <= after + 800
    assert sent["deliver_at_ms"].deliver_at_ms == before + 900
    assert before + 1_000 <= sent["delay_level"].deliver_at_ms <= after + 1_000
    assert sent["past"].deliver_at_ms == before - 5_000  # kept as given, fired at once

    collector.wait_count(len(sent))
    arrived = {d.message_id: (d, at) for d, at in collector.deliveries}
    assert set(arrived) == {r.message_id for r in sent.values()}
    for form, result in sent.items():
        delivery, arrival_ms = arrived[result.message_id]
        due_ms = max(result.deliver_at_ms, before)  # a past time is due at receipt
        assert delivery.deliver_at_ms == result.deliver_at_ms, form
        assert delivery.fired_at_ms >= result.deliver_at_ms, f"{form} fired early"
        assert arrival_ms >= result.deliver_at_ms, f"{form} arrived early"
        assert delivery.fired_at_ms - due_ms <= FIRE_BOUND_MS + (after - before), form
        assert arrival_ms - due_ms <= ARRIVAL_BOUND_MS + (after - before), form
        assert delivery.attempt == 1 and delivery.topic == "orders"
    assert arrived[sent["delay_ms"].message_id][0].body == b"d"
    assert dict(arrived[sent["delay_ms"].message_id][0].properties) == {"k": "v"}


def test_send_batch_stores_all_in_one_call_in_order(client):
    requests = [TimerClient.request("bulk", f"m{i}", delay_ms=HOUR_MS + i) for i in range(200)]
    results = client.send_batch(requests)
    assert len(results) == 200
    assert len({r.message_id for r in results}) == 200
    listed = list(client.list_all("bulk", limit=77, include_body=True))
    assert [m.message_id for m in listed] == [r.message_id for r in results]
    assert [m.body for m in listed[:2]] == [b"m0", b"m1"]
    page, _ = client.list("bulk", limit=2)
    assert [m.body for m in page] == [b"", b""], "List leaves bodies out unless asked"


def test_cancel_before_firing_is_never_delivered(client, collectors):
    collector = Collector(client, "orders")
    collectors.append(collector)
    cancelled = client.send("orders", b"cancel me", delay_ms=600)
    control = client.send("orders", b"keep me", delay_ms=600)  # due no earlier
    assert client.cancel(cancelled.message_id) is State.CANCELLED
    assert client.cancel(cancelled.message_id) is State.CANCELLED  # twice is fine

    collector.wait_count(1)
    # The control fired, so the writer passed the cancelled timer's time too.
    assert collector.ids() == [control.message_id]
    timer = client.get(cancelled.message_id)
    assert timer.state == State.CANCELLED and timer.cancelled_at_ms > 0 and timer.wheel == ""


def test_cancel_after_firing_is_failed_precondition(client):
    fired = client.send("orders", b"x", delay_ms=0)  # due at once: fired by the send's commit
    error = status_of(lambda: client.cancel(fired.message_id))
    assert error.code == grpc.StatusCode.FAILED_PRECONDITION
    assert fired.message_id in error.details and "FIRED" in error.details
    assert client.get(fired.message_id).state == State.FIRED


def test_get_reports_every_state(client, collectors):
    # 8 s is inside the second wheel at any point of a minute (its cascade lead is 50 s);
    # the lead and a minute more is always past it, and 3 h always past the minute wheel.
    second = client.send("orders", b"s", delay_ms=8_000)
    minute = client.send("orders", b"m", delay_ms=Settings().minute_cascade_lead_ms + 70_000)
    hour = client.send("orders", b"h", delay_ms=3 * HOUR_MS)
    for result, wheel in ((second, "second"), (minute, "minute"), (hour, "hour")):
        timer = client.get(result.message_id)
        assert (timer.state, timer.wheel) == (State.SCHEDULED, wheel)
        assert timer.deliver_at_ms == result.deliver_at_ms and timer.fired_at_ms == 0

    with_body = client.get(hour.message_id, include_body=True)
    without_body = client.get(hour.message_id, include_body=False)
    assert with_body.body == b"h" and without_body.body == b""
    assert without_body.topic == "orders" and without_body.created_at_ms > 0

    collector = Collector(client, "fired-topic", auto_ack=False)
    collectors.append(collector)
    fired = client.send("fired-topic", b"f", delay_ms=0)
    collector.wait_count(1)
    timer = client.get(fired.message_id)
    assert (timer.state, timer.wheel) == (State.FIRED, "")
    assert timer.fired_at_ms >= timer.created_at_ms and timer.acked_at_ms == 0

    assert client.ack("fired-topic", [fired.message_id]) == 1
    timer = client.get(fired.message_id)
    assert timer.state == State.ACKED and timer.acked_at_ms >= timer.fired_at_ms

    assert client.cancel(second.message_id) is State.CANCELLED
    timer = client.get(second.message_id)
    assert timer.state == State.CANCELLED and timer.cancelled_at_ms > 0


def test_list_pages_through_a_time_range(client):
    base = wall_ms() + 2 * HOUR_MS
    ids = [
        client.send("orders", f"{i}", deliver_at_ms=base + i * 1_000).message_id for i in range(30)
    ]
    client.send("other", b"x", deliver_at_ms=base + 7_000)  # same time, other topic
    page_sizes, listed, token = [], [], ""
    while True:
        page, token = client.list("orders", base + 5_000, base + 20_000, 4, token)
        page_sizes.append(len(page))
        listed.extend(page)
        if not token:
            break
    assert page_sizes == [4, 4, 4, 3]
    assert [m.message_id for m in listed] == ids[5:20]
    assert all(m.state == State.SCHEDULED and m.wheel for m in listed)
    assert [m.deliver_at_ms for m in listed] == [base + i * 1_000 for i in range(5, 20)]
    # to_ms = 0: no upper bound.
    assert [m.message_id for m in client.list_all("orders", base, 0, 10)] == ids


def test_idempotent_resend(client):
    props = {"a": "1"}
    first = client.send("orders", b"x", delay_ms=60_000, message_id="order-1", properties=props)
    again = client.send("orders", b"x", delay_ms=60_000, message_id="order-1", properties=props)
    assert not first.existed
    # the same answer, though received later, and it says the id was stored already
    assert again == first._replace(existed=True, existing_state=State.SCHEDULED)

    for change in (
        {"body": b"y", "delay_ms": 60_000},
        {"body": b"x", "delay_ms": 60_001},
        {"body": b"x", "deliver_at_ms": first.deliver_at_ms},
    ):
        body = change.pop("body")
        error = status_of(
            lambda body=body, change=change: client.send(
                "orders", body, message_id="order-1", properties={"a": "1"}, **change
            )
        )
        assert error.code == grpc.StatusCode.ALREADY_EXISTS
        assert "order-1" in error.details
        # The stored message's content stays hidden: the id may be someone else's.
        for secret in ("orders", str(first.deliver_at_ms), "SCHEDULED"):
            assert secret not in error.details
    assert client.get("order-1").body == b"x"

    fired = client.send("orders", b"now", delay_ms=0, message_id="order-2")
    assert client.get("order-2").state == State.FIRED
    assert client.send("orders", b"now", delay_ms=0, message_id="order-2") == fired._replace(
        existed=True, existing_state=State.FIRED
    )

    batch = client.send_batch(
        [TimerClient.request("orders", b"b", delay_ms=5_000, message_id="order-3")] * 2
    )
    assert batch[0] == batch[1] and batch[0].message_id == "order-3"  # twice in one request
    assert not batch[0].existed
