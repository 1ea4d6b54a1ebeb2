"""The load-test consumer's Subscribe stream against scripted streams
(timerwheel.loadtest.consumer): it subscribes again after an error keeping its tally,
counts acks lost with a worker as of unknown outcome rather than an error, and reports
a stream still down at the stop as an error."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import grpc
from helpers.waits import until

from timerwheel.loadtest.pacing import encode_body
from timerwheel.types import RemoteError


class _Stream:
    """A Subscribe stream that yields `batches`, then raises `error` (or ends)."""

    def __init__(self, batches, error=None):
        self.batches, self.error, self.cancelled = batches, error, False

    def __iter__(self):
        yield from self.batches
        if self.error is not None:
            raise self.error

    def cancel(self):
        self.cancelled = True


class _Idle(_Stream):
    """A stream that is up and delivers nothing until cancelled."""

    def __init__(self):
        super().__init__([])
        self._cancel = threading.Event()

    def __iter__(self):
        self._cancel.wait(30)
        yield from ()

    def cancel(self):
        self.cancelled = True
        self._cancel.set()


def test_a_consumer_stream_subscribes_again_after_an_error_keeping_its_tally():
    from timerwheel.loadtest.consumer import ConsumerPlan, Stream

    def delivery(seq):
        return SimpleNamespace(
            message_id=f"m{seq}", body=encode_body(0, seq, b""),
            deliver_at_ms=0, fired_at_ms=0, attempt=1,
        )  # fmt: skip

    gone = RemoteError(grpc.StatusCode.UNAVAILABLE, "Socket closed")
    streams = iter([
        _Stream([[delivery(0)]], gone),  # the worker dies after one batch
        _Stream([], gone),  # still restarting
        _Stream([[delivery(1)], [delivery(0)]]),  # back: the un-acked one again, then ended
    ])  # fmt: skip
    idle = _Idle()
    opened = threading.Event()
    acked: list[str] = []

    def subscribe(topic, max_in_flight):
        try:
            return next(streams)
        except StopIteration:
            opened.set()
            return idle  # the fourth: up, idle until stopped

    def ack(topic, ids):
        acked.extend(ids)
        return len(ids)

    client = SimpleNamespace(subscribe=subscribe, ack=ack)
    plan = ConsumerPlan(0, "t", ("lt-x",), 10, 5.0, 60.0, ack_linger_ms=0)
    stream = Stream(client, "lt-x", plan, on_batch=lambda: None)
    assert opened.wait(10)
    stream.stop()
    assert stream.resubscribed == 3 and stream.error is None and idle.cancelled
    assert stream.tally.received == 3 and stream.tally.first_receipts == 2
    assert sorted(acked) == ["m0", "m0", "m1"] and stream.tally.acked == 3
    assert stream.ack_unknown == 0


def test_acks_lost_with_a_worker_are_of_unknown_outcome_not_an_error():
    from timerwheel.loadtest.consumer import ConsumerPlan, Stream

    batches = [[SimpleNamespace(
        message_id=f"m{seq}", body=encode_body(0, seq, b""), deliver_at_ms=0, fired_at_ms=0,
        attempt=1,
    )] for seq in range(3)]  # fmt: skip
    answers = iter([RemoteError(grpc.StatusCode.UNAVAILABLE, "Socket closed"), 0, 1])

    def ack(topic, ids):  # failed; then a retry that finds it acked; then acked
        answer = next(answers)
        if isinstance(answer, Exception):
            raise answer
        return answer

    idle = _Idle()
    subscriptions = iter([_Stream([batches[0]]), _Stream([batches[1]]), _Stream([batches[2]])])
    client = SimpleNamespace(subscribe=lambda *a: next(subscriptions, idle), ack=ack)
    plan = ConsumerPlan(0, "t", ("lt-x",), 10, 5.0, 60.0, ack_linger_ms=0)
    stream = Stream(client, "lt-x", plan, on_batch=lambda: None)
    until(lambda: stream.resubscribed >= 3, "subscribed again after each stream's end")
    stream.stop()
    assert stream.error is None and stream.tally.acked == 1 and stream.ack_unknown == 2


def test_a_consumer_stream_still_down_at_the_stop_is_an_error():
    from timerwheel.loadtest.consumer import ConsumerPlan, Stream

    gone = RemoteError(grpc.StatusCode.UNAVAILABLE, "Connection refused")
    client = SimpleNamespace(subscribe=lambda topic, max_in_flight: _Stream([], gone))
    plan = ConsumerPlan(0, "t", ("lt-x",), 10, 5.0, 60.0, ack_linger_ms=0)
    stream = Stream(client, "lt-x", plan, on_batch=lambda: None)
    until(lambda: stream.resubscribed >= 2, "subscribed again after the refusal")
    stream.stop()
    assert stream.error is not None and "still down at the stop" in stream.error
    assert "UNAVAILABLE" in stream.error
