"""Model-based test of delivery: subscribers, acks, nacks (with and without a backoff),
ack timeouts, streams that end, dead letters and reopens, in virtual time against the
real engine and RocksDB, checked against a plain dictionary model.

The hub and the engine run without threads (`background=False`), so every fire, expiry
and dead-letter move happens inside the call that causes it and the model can predict
the hub exactly. Properties checked after every step:
- a delivered message has fired, never before its time; it is not acked, not dead, not
  in flight at anyone else, and not inside a backoff: a nack's own, or the retry
  policy's after an ack timeout or a nack that names none (an ended stream: none);
- its attempt number is its failed attempts, plus one; a reopen fails what was in
  flight, and attempt counts carry on across it (from the traces: delivery/trace.py);
  one whose reopen used up its last attempt goes to its DLQ when its topic is next read;
- a subscriber with room gets as many as it has room for, up to what is available,
  except that one a batch filled (silly-window avoidance: delivery/dispatcher.py) gets
  nothing while its room is below its reopen room (a quarter of its window, at most a
  batch, at least one) and at least that many are available;
- a message that fails its max_attempts-th attempt (nack, ack timeout, stream end)
  appears on its topic's DLQ exactly once, with that attempt count, and never again on
  its own topic; an ack of it on its old topic is refused;
- `drain` (a patient consumer that acks everything) leaves every fired message acked
  or dead: nothing is stuck.

The server's ids are drawn from a generator seeded at each example's start: their 80
random bits order ties (in the store and the hub's heaps), so with `secrets` a replayed
example could take another path and hypothesis call the search flaky.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, precondition, rule

from timerwheel.delivery.hub import DeliveryHub, Subscriber
from timerwheel.engine import ids as ids_module
from timerwheel.engine.engine import Engine
from timerwheel.store.records import record_fired_at_ms
from timerwheel.wheels.clock import VirtualClock
from timerwheel.wheels.domain import SendOptions, SendSpec, When, WhenKind
from timerwheel.wheels.retry import backoff_ms
from timerwheel.wheels.settings import Settings

pytestmark = pytest.mark.system  # a long randomized search (a hypothesis state machine)

TOPICS = ("jobs", "mail")
ACK_TIMEOUT_MS = 1_000
BATCH_MAX = 3  # small, so a subscriber's room and the batch limit both matter
# The server's retry policy, small enough that backoffs end inside a run; its jitter
# draw is pinned, so the model knows each backoff to the millisecond.
RETRY = {"retry_initial_ms": 300, "retry_max_ms": 1_200, "retry_jitter_percent": 20}
JITTER_DRAW = 0.5
backoffs = st.sampled_from([0, 0, 1, 400, 2_500])


class _SeededSecrets:
    """What engine/ids.py takes from `secrets`, from a seeded generator."""

    def __init__(self) -> None:
        self._random = random.Random(0)

    def token_hex(self, nbytes: int) -> str:
        return self._random.randbytes(nbytes).hex()


@dataclass
class Msg:
    """The model of one message."""

    topic: str
    deliver_at_ms: int
    limit: int  # max_attempts (0: unlimited)
    state: str = "scheduled"  # scheduled | fired | doomed | acked | dead
    failures: int = 0  # failed attempts (doomed: a reopen used up its last one)
    holder: int | None = None  # the subscriber it is in flight at
    deadline_ms: int = 0  # its ack deadline while in flight
    backoff_until_ms: int = 0  # a nack's backoff: not delivered before


class DeliveryModel(RuleBasedStateMachine):
    subscribers = Bundle("subscribers")

    def __init__(self) -> None:
        super().__init__()
        self._secrets = ids_module.secrets
        ids_module.secrets = _SeededSecrets()  # type: ignore[assignment]
        self.dir = tempfile.mkdtemp(prefix="timerwheel-delivery-model-")
        self.clock = VirtualClock(1_700_000_000_000)
        self.settings = Settings(
            data_dir=self.dir, sync_writes=False, ack_timeout_ms=ACK_TIMEOUT_MS,
            delivery_batch_max=BATCH_MAX, **RETRY,
        )  # fmt: skip
        self.policy = self.settings.retry_policy()
        self._open()
        self.msgs: dict[str, Msg] = {}
        self.subs: dict[int, Subscriber] = {}
        self.full: dict[int, bool] = {}  # a batch filled it, and none came since
        self.next_sub = 0
        self.dlq_cursor = dict.fromkeys(TOPICS, 0)
        self.dlq_seen: set[str] = set()

    def _open(self) -> None:
        self.engine = Engine(self.settings, self.clock, background=False)
        self.hub = DeliveryHub(
            self.engine, self.settings, self.clock.now_ms, background=False,
            random01=lambda: JITTER_DRAW,
        )  # fmt: skip

    def teardown(self) -> None:
        self.hub.close()
        self.engine.close()
        shutil.rmtree(self.dir, ignore_errors=True)
        ids_module.secrets = self._secrets

    # -- model helpers ----------------------------------------------------------------
    def _fire_due(self) -> None:
        """Run the engine; whatever is due has fired (the engine model proves the engine)."""
        self.engine.run_until_idle()
        now_ms = self.clock.now_ms()
        for msg in self.msgs.values():
            if msg.state == "scheduled" and msg.deliver_at_ms <= now_ms:
                msg.state = "fired"
        self._check_dead_letters()

    def _fail(self, msg: Msg, backoff_until_ms: int = 0, now_ms: int | None = None) -> bool:
        """One failed attempt (timerwheel.delivery.attempts.fail); True when it made the message
        dead. With `now_ms` and no backoff of its own, the retry policy's backoff for the
        attempt that failed; with neither (an ended stream), redelivered at once."""
        msg.holder = None
        msg.failures += 1
        if msg.limit and msg.failures >= msg.limit:
            msg.state = "dead"
            return True
        if not backoff_until_ms and now_ms is not None:
            wait_ms = backoff_ms(self.policy, msg.failures, JITTER_DRAW)
            backoff_until_ms = now_ms + wait_ms if wait_ms > 0 else 0
        msg.backoff_until_ms = backoff_until_ms
        return False

    def _available(self, topic: str, now_ms: int) -> list[str]:
        return [
            mid for mid, m in self.msgs.items()
            if m.topic == topic and m.state == "fired" and m.holder is None
            and m.backoff_until_ms <= now_ms
        ]  # fmt: skip

    def _in_flight(self, sub_key: int) -> list[str]:
        return [mid for mid, m in self.msgs.items() if m.holder == sub_key]

    def _check_dead_letters(self) -> None:
        """Each dead message is on its DLQ exactly once, with its attempt count."""
        for topic in TOPICS:
            dlq = topic + ".dlq"
            for fired in self.engine.fetch_fired(dlq, self.dlq_cursor[topic], 10_000):
                self.dlq_cursor[topic] = fired.seq
                mid = fired.timer.message_id
                assert mid not in self.dlq_seen, f"{mid} twice on {dlq}"
                msg = self.msgs[mid]
                if msg.state == "doomed":  # moved as its topic was read after a reopen
                    msg.state = "dead"
                assert msg.state == "dead" and msg.topic == topic, (mid, msg)
                properties = fired.timer.properties
                assert properties["timerwheel.dead_letter.topic"] == topic
                assert properties["timerwheel.dead_letter.attempts"] == str(msg.limit)
                self.dlq_seen.add(mid)

    # -- rules ------------------------------------------------------------------------
    @rule(
        topic=st.sampled_from(TOPICS),
        delay_ms=st.integers(0, 3_000),
        limit=st.sampled_from([0, 1, 2, 3]),
    )
    def send(self, topic: str, delay_ms: int, limit: int) -> None:
        spec = SendSpec(
            topic, b"m", When(WhenKind.DELAY, delay_ms), options=SendOptions(max_attempts=limit)
        )
        result = self.engine.send(spec)
        self.msgs[result.message_id] = Msg(topic, result.deliver_at_ms, limit)
        self._fire_due()

    @rule(topic=st.sampled_from(TOPICS), count=st.integers(8, 20))
    def burst(self, topic: str, count: int) -> None:
        """Many due at once: a window fills and a backlog waits behind it."""
        specs = [SendSpec(topic, b"m", When(WhenKind.DELAY, 0)) for _ in range(count)]
        for result in self.engine.send_batch(specs):
            self.msgs[result.message_id] = Msg(topic, result.deliver_at_ms, 0)
        self._fire_due()

    @rule(delta_ms=st.sampled_from([1, 300, 999, 1_000, 2_600, 5_000]))
    def advance(self, delta_ms: int) -> None:
        self.clock.advance(delta_ms)
        self._fire_due()

    @rule(target=subscribers, topic=st.sampled_from(TOPICS), room=st.integers(1, 12))
    def subscribe(self, topic: str, room: int) -> int:
        key = self.next_sub
        self.next_sub += 1
        self.subs[key] = self.hub.subscribe(topic, room)
        self.full[key] = False
        return key

    @rule(sub_key=subscribers)
    def receive(self, sub_key: int) -> None:
        self._receive(sub_key)

    @rule(
        target=subscribers, topic=st.sampled_from(TOPICS), window=st.sampled_from([8, 12]),
        backlog=st.integers(0, 20), acks=st.integers(0, 4),
    )  # fmt: skip
    def read_on(self, topic: str, window: int, backlog: int, acks: int) -> int:
        """`backlog` more fire at once; a new consumer reads batch after batch (its
        window fills if enough fired), then acks one message at a time, reading after
        each Ack; it stays."""
        if backlog:
            self.burst(topic, backlog)
        sub_key = self.subscribe(topic, window)
        while self._receive(sub_key):
            pass
        for _ in range(acks):
            held = self._in_flight(sub_key)
            if not held:
                break
            assert self.hub.ack(topic, held[:1]) == 1
            self.msgs[held[0]].state, self.msgs[held[0]].holder = "acked", None
            self._receive(sub_key)
        return sub_key

    def _receive(self, sub_key: int) -> int:
        """One `next_batch`, checked against the model; how many it handed out."""
        subscriber = self.subs.get(sub_key)
        if subscriber is None:
            return 0
        now_ms = self.clock.now_ms()
        for msg in self.msgs.values():  # the dispatcher expires ack deadlines first
            held = msg.topic == subscriber.topic and msg.holder is not None
            if held and msg.deadline_ms <= now_ms:
                self._fail(msg, now_ms=now_ms)
        window = subscriber.max_in_flight
        room = window - len(self._in_flight(sub_key))
        available = self._available(subscriber.topic, now_ms)
        reopen_room = min(BATCH_MAX, max(1, window // 4))
        held_back = self.full[sub_key] and room < reopen_room <= len(available)
        batch = self.hub.next_batch(subscriber, timeout_s=0)
        assert batch is not None
        expected = 0 if held_back else min(max(room, 0), BATCH_MAX, len(available))
        assert len(batch) == expected, (len(batch), room, len(available), self.full[sub_key])
        if batch:
            self.full[sub_key] = len(batch) >= room
        for delivered in batch:
            mid = delivered.fired.message_id
            fired_at_ms = record_fired_at_ms(delivered.fired.record)
            assert mid in available, f"{mid} delivered but not available: {self.msgs.get(mid)}"
            msg = self.msgs[mid]
            assert msg.deliver_at_ms <= fired_at_ms <= now_ms, "delivered early"
            assert delivered.attempt == msg.failures + 1, (mid, delivered.attempt, msg)
            msg.holder, msg.deadline_ms = sub_key, now_ms + ACK_TIMEOUT_MS
            available.remove(mid)
        self._check_dead_letters()
        return len(batch)

    @precondition(lambda self: any(m.holder is not None for m in self.msgs.values()))
    @rule(data=st.data())
    def ack(self, data) -> None:
        holders = sorted({m.holder for m in self.msgs.values() if m.holder is not None})
        sub_key = data.draw(st.sampled_from(holders))
        ids = data.draw(st.lists(st.sampled_from(self._in_flight(sub_key)), min_size=1))
        topic = self.subs[sub_key].topic
        assert self.hub.ack(topic, ids) == len(set(ids))
        for mid in ids:
            self.msgs[mid].state, self.msgs[mid].holder = "acked", None

    @precondition(lambda self: self.msgs)
    @rule(data=st.data())
    def ack_any(self, data) -> None:
        """An ack of any id, held or not, on its topic: only a FIRED one is acked."""
        mid = data.draw(st.sampled_from(sorted(self.msgs)))
        msg = self.msgs[mid]
        expected = int(msg.state in ("fired", "doomed"))
        assert self.hub.ack(msg.topic, [mid]) == expected, (mid, msg)
        if expected:
            msg.state, msg.holder = "acked", None

    @precondition(lambda self: any(m.holder is not None for m in self.msgs.values()))
    @rule(data=st.data(), backoff_ms=backoffs)
    def nack(self, data, backoff_ms: int) -> None:
        holders = sorted({m.holder for m in self.msgs.values() if m.holder is not None})
        sub_key = data.draw(st.sampled_from(holders))
        ids = sorted(set(data.draw(st.lists(st.sampled_from(self._in_flight(sub_key))))))
        topic = self.subs[sub_key].topic
        now_ms = self.clock.now_ms()
        backoff_until_ms = now_ms + backoff_ms if backoff_ms else 0
        dead = sum(self._fail(self.msgs[mid], backoff_until_ms, now_ms) for mid in ids)
        nacked, dead_lettered = self.hub.nack(topic, ids, "model", backoff_ms)
        assert (nacked, dead_lettered) == (len(ids), dead)
        self._check_dead_letters()

    @rule(sub_key=subscribers)
    def end_stream(self, sub_key: int) -> None:
        """The stream ends: what it held failed an attempt and is redelivered at once."""
        subscriber = self.subs.pop(sub_key, None)
        if subscriber is None:
            return
        for mid in self._in_flight(sub_key):
            self._fail(self.msgs[mid])
        self.hub.release(subscriber)
        assert subscriber.closed
        self._check_dead_letters()

    @rule(down_ms=st.sampled_from([0, 1_500]))
    def reopen(self, down_ms: int) -> None:
        """Close and reopen: streams end (what they held failed an attempt), un-acked
        fired messages are delivered again with their attempt counts carried on, and
        backoffs are forgotten."""
        self.hub.close()
        self.engine.close()
        self.subs.clear()
        self.clock.advance(down_ms)
        self._open()
        for msg in self.msgs.values():
            if msg.holder is not None:
                msg.failures += 1
                if msg.limit and msg.failures >= msg.limit:
                    msg.state = "doomed"
            msg.holder, msg.backoff_until_ms = None, 0
        self._fire_due()

    @rule()
    def drain(self) -> None:
        """A patient consumer per topic takes and acks everything: nothing is stuck.
        Two rounds: the first expires what others held, which then waits out its retry
        backoff; the second, past every backoff, takes it."""
        for _ in range(2):
            self.clock.advance(ACK_TIMEOUT_MS + 2_500)  # past every deadline and backoff
            self._fire_due()
            for topic in TOPICS:
                key = self.subscribe(topic, 5)
                self.receive(key)
                while held := self._in_flight(key):
                    assert self.hub.ack(topic, held) == len(held)
                    for mid in held:
                        self.msgs[mid].state, self.msgs[mid].holder = "acked", None
                    self.receive(key)
                self.end_stream(key)
        now_ms = self.clock.now_ms()
        stuck = [
            mid for mid, m in self.msgs.items()
            if m.deliver_at_ms <= now_ms and m.state not in ("acked", "dead")
        ]  # fmt: skip
        assert not stuck, [self.msgs[mid] for mid in stuck]

    @invariant()
    def every_dead_message_is_on_its_dlq(self) -> None:
        dead = {mid for mid, m in self.msgs.items() if m.state == "dead"}
        assert dead == self.dlq_seen

    @invariant()
    def backlog_is_what_is_fired_and_not_acked(self) -> None:
        fired = sum(1 for m in self.msgs.values() if m.state in ("fired", "doomed"))
        dlq = len(self.dlq_seen)  # dead letters wait, fired, on their DLQ topics
        assert self.engine.unacked() == fired + dlq


DeliveryModel.TestCase.settings = settings(
    max_examples=int(os.environ.get("TIMERWHEEL_MODEL_EXAMPLES", "40")),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
TestDeliveryModel = DeliveryModel.TestCase
