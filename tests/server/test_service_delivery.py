"""timerwheel.server.service.delivery_batch: the DeliveryBatch a Subscribe stream sends for fired
records."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from timerwheel.common import State
from timerwheel.server.service import delivery_batch
from timerwheel.store import records
from timerwheel.wheels.domain import Timer, When, WhenKind

fired_timers = st.builds(
    Timer,
    message_id=st.text(alphabet="ABCDEF0123456789", min_size=1, max_size=32),
    topic=st.sampled_from(["orders", "orders.dlq", "ré-essais"]),
    body=st.binary(max_size=200),
    properties=st.dictionaries(st.text(min_size=1, max_size=10), st.text(max_size=10), max_size=3),
    deliver_at_ms=st.integers(0, 2**62),
    created_at_ms=st.integers(0, 2**62),
    state=st.just(State.FIRED),
    when=st.just(When(WhenKind.DELAY, 0)),
    fired_at_ms=st.integers(0, 2**62),
    ready_seq=st.integers(0, 2**62),
)


@given(st.lists(st.tuples(fired_timers, st.integers(1, 50)), max_size=12))
def test_each_delivery_carries_its_records_fields_and_its_attempt(items):
    rows = [
        (timer.ready_seq, timer.message_id, records.encode_timer(timer), attempt)
        for timer, attempt in items
    ]
    sent = delivery_batch(rows).deliveries
    assert [(d.message_id, d.topic, d.body, dict(d.properties)) for d in sent] == [
        (t.message_id, t.topic, t.body, t.properties) for t, _ in items
    ]
    assert [(d.deliver_at_ms, d.fired_at_ms, d.attempt) for d in sent] == [
        (t.deliver_at_ms, t.fired_at_ms, attempt) for t, attempt in items
    ]
