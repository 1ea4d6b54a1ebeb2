"""The state join (timerwheel.store.batch_state) against a plain model: hypothesis makes a
sequence of version-2 operations (sends in segments, fires with their cascades, Acks,
Cancels, purges, Reschedules, Nacks with a delay, REPLACEs of client-chosen ids, bulk
cancels and purges of a topic's time range, sweeps), the product's writers stage
them into real RocksDB (helpers.batch_v2 drives them), and after each
operation every answer of the join (Get, the segment walk, List, Count) and the pending
counters must equal a dictionary's that applied the same operations to each message's
state directly."""

from __future__ import annotations

import tempfile
from collections import Counter

from helpers.batch_v2 import Writer, open_v2
from helpers.budget import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from timerwheel.common import State
from timerwheel.store.batch_state import BatchStateReader, MessageState
from timerwheel.store.segment_ids import parse_id
from timerwheel.wheels.bulk import TimerFilter

RETENTION_MS = 2_000
TOPICS = ("orders", "mail")

advance = st.integers(0, 1_500)
target = st.integers(0, 10_000)
operations = st.lists(
    st.one_of(
        st.tuples(
            st.just("send"),
            st.lists(
                st.tuples(st.sampled_from(TOPICS), st.integers(0, 3_000)), min_size=1, max_size=6
            ),
            advance,
        ),
        st.tuples(st.just("fire"), st.integers(1, 4), advance),
        st.tuples(st.just("ack"), st.lists(target, min_size=1, max_size=4), advance),
        st.tuples(st.just("cancel"), target, advance),
        st.tuples(st.just("move"), st.tuples(target, st.integers(1, 3_000)), advance),
        st.tuples(
            st.just("replace"),
            st.tuples(st.integers(0, 1), st.sampled_from(TOPICS), st.integers(0, 3_000)),
            advance,
        ),
        st.tuples(
            st.just("bulk"),
            st.tuples(
                st.sampled_from(TOPICS),
                st.integers(-3_000, 3_000),
                st.integers(1, 6_000),
                st.booleans(),
            ),
            advance,
        ),
        st.tuples(st.just("sweep"), st.none(), advance),
    ),
    max_size=30,
)


class Model:
    """Each message's state, applied directly: what the join must answer."""

    def __init__(self) -> None:
        self.timers: dict[str, MessageState] = {}
        self.sent: list[str] = []  # every id, swept or not: operations pick from these
        # A client-chosen id: the server-made id of its message now. A message's
        # `message_id` is its client id if it has one (what a walk or a List reports),
        # and `timers` and `sent` hold server-made ids.
        self.client: dict[str, str] = {}

    def send(self, ids: list[str], messages: list[tuple[str, int]], now_ms: int) -> None:
        for message_id, (topic, delay) in zip(ids, messages, strict=True):
            parsed = parse_id(message_id)
            self.timers[message_id] = MessageState(
                message_id, parsed.segment, parsed.message_index, topic, State.SCHEDULED,
                now_ms + delay,
            )  # fmt: skip
            self.sent.append(message_id)

    def pick(self, n: int, *states: State) -> str | None:
        made = self.sent[n % len(self.sent)] if self.sent else ""
        found = self.timers.get(made)
        return made if found is not None and found.state in states else None

    def fire(self, now_ms: int, limit: int) -> None:
        due = [
            (t.deliver_at_ms, t.segment, t.message_index, made)
            for made, t in self.timers.items()
            if t.state is State.SCHEDULED and t.deliver_at_ms <= now_ms
        ]
        for *_, made in sorted(due)[:limit]:
            self.timers[made] = self.timers[made]._replace(state=State.FIRED, fired_at_ms=now_ms)

    def settle(self, message_id: str, state: State, now_ms: int) -> None:
        t = self.timers[message_id]._replace(state=state, fired_at_ms=0)
        at = {"acked_at_ms": now_ms} if state is State.ACKED else {"cancelled_at_ms": now_ms}
        self.timers[message_id] = t._replace(**at)

    def move(self, message_id: str, deliver_ms: int) -> None:
        t = self.timers[message_id]
        self.timers[message_id] = t._replace(
            state=State.SCHEDULED, deliver_at_ms=deliver_ms, fired_at_ms=0
        )

    def replace(self, client_id: str, topic: str, deliver_ms: int, now_ms: int) -> State | None:
        """What a REPLACE must find of the old copy (FIRED, ACKED: refused)."""
        made = self.client.get(client_id, "")
        old = self.timers.get(made)
        if old is not None and old.state is State.SCHEDULED:
            self.settle(made, State.CANCELLED, now_ms)
        return None if old is None else old.state

    def replaced(self, client_id: str, made: str, topic: str, deliver_ms: int) -> None:
        parsed = parse_id(made)
        self.timers[made] = MessageState(
            client_id, parsed.segment, parsed.message_index, topic, State.SCHEDULED, deliver_ms
        )
        self.sent.append(made)
        self.client[client_id] = made

    def bulk(self, f: TimerFilter, purge: bool, now_ms: int) -> list[str]:
        states = (State.SCHEDULED, State.FIRED) if purge else (State.SCHEDULED,)
        hit = [
            made
            for made, t in self.timers.items()
            if t.state in states and f.matches(t.message_id, t.topic, t.deliver_at_ms)
        ]
        for made in hit:
            self.settle(made, State.CANCELLED, now_ms)
        return hit

    def sweep(self, now_ms: int) -> None:
        by_segment: dict[int, list[MessageState]] = {}
        for t in self.timers.values():
            by_segment.setdefault(t.segment, []).append(t)
        made = {(t.segment, t.message_index): m for m, t in self.timers.items()}
        for timers in by_segment.values():
            if all(t.state in (State.ACKED, State.CANCELLED) for t in timers):
                last = max(t.acked_at_ms or t.cancelled_at_ms for t in timers)
                if last + RETENTION_MS <= now_ms:
                    for t in timers:
                        del self.timers[made[t.segment, t.message_index]]


def apply(op, writer: Writer, model: Model, now_ms: int) -> None:
    kind, arg, _ = op
    if kind == "send":
        model.send(writer.send(arg, now_ms), arg, now_ms)
    elif kind == "fire":
        writer.fire(now_ms, arg)
        model.fire(now_ms, arg)
    elif kind == "ack":
        picked = {model.pick(n, State.FIRED) for n in arg} - {None}
        if picked:
            writer.ack(sorted(picked), now_ms)  # type: ignore[arg-type]
            for message_id in picked:
                model.settle(message_id, State.ACKED, now_ms)  # type: ignore[arg-type]
    elif kind == "cancel":
        message_id = model.pick(arg, State.SCHEDULED, State.FIRED)
        if message_id is not None:
            writer.cancel(message_id, now_ms)
            model.settle(message_id, State.CANCELLED, now_ms)
    elif kind == "move":
        n, delay = arg
        message_id = model.pick(n, State.SCHEDULED, State.FIRED)
        if message_id is not None:
            writer.move(message_id, now_ms + delay, delay)
            model.move(message_id, now_ms + delay)
    elif kind == "replace":
        n, topic, delay = arg
        client_id = f"t/c{n}"
        expected = model.replace(client_id, topic, now_ms + delay, now_ms)
        done = writer.replace(client_id, topic, delay, now_ms)
        if expected in (State.FIRED, State.ACKED):
            assert done is None, (client_id, expected)
        else:
            assert done is not None and done[0] is expected, (client_id, expected, done)
            model.replaced(client_id, done[1], topic, now_ms + delay)
    elif kind == "bulk":
        topic, start, width, purge = arg
        f = TimerFilter(topic=topic, from_ms=now_ms + start, to_ms=now_ms + start + width)
        changed = writer.bulk_cancel(f, purge, now_ms)
        hit = model.bulk(f, purge, now_ms)
        assert sorted(changed) == sorted(model.timers[m].message_id for m in hit)
    else:
        writer.sweep(now_ms)
        model.sweep(now_ms)


def check(reader: BatchStateReader, model: Model) -> None:
    for message_id in model.sent:
        expected = model.timers.get(message_id)
        if expected is not None:  # a Get by server-made id reports the id asked for
            expected = expected._replace(message_id=message_id)
        assert reader.get(message_id) == expected, message_id
    for client_id, made in model.client.items():
        expected = model.timers.get(made)
        assert reader.get_client_id(client_id) == expected, client_id
    walked = list(reader.scan())
    assert walked == sorted(model.timers.values(), key=lambda t: (t.segment, t.message_index))
    for topic in TOPICS:
        assert reader.count_states(topic) == Counter(
            t.state for t in model.timers.values() if t.topic == topic
        )
        scheduled = sorted(
            (t for t in model.timers.values() if t.topic == topic and t.state is State.SCHEDULED),
            key=lambda t: (t.deliver_at_ms, t.segment, t.message_index),
        )
        assert reader.list_scheduled(topic) == scheduled
        if scheduled:
            middle = scheduled[len(scheduled) // 2].deliver_at_ms
            assert reader.count_scheduled(topic, middle, middle + 1_000) == sum(
                middle <= t.deliver_at_ms < middle + 1_000 for t in scheduled
            )


def check_counts(store, model: Model) -> None:
    """The counters the send, the fire and the writer keep: SCHEDULED messages a topic,
    and a minute (the busiest)."""
    counts = store.opened.counts
    for topic in TOPICS:
        scheduled = [
            t.deliver_at_ms
            for t in model.timers.values()
            if t.topic == topic and t.state is State.SCHEDULED
        ]
        assert counts.total(topic) == len(scheduled), topic
        if scheduled:
            minute = max(Counter(ms - ms % 60_000 for ms in scheduled).items(), key=lambda m: m[1])
            assert counts.in_range(topic, minute[0], minute[0] + 60_000)[0] == minute[1]


def pages(reader: BatchStateReader, topic: str, size: int) -> list[MessageState]:
    out: list[MessageState] = []
    while True:
        after = None if not out else (out[-1].deliver_at_ms, out[-1].segment, out[-1].message_index)
        page = reader.list_scheduled(topic, limit=size, after=after)
        out += page
        if len(page) < size:
            return out


def memory(store) -> tuple:
    """What the writers keep of the live segments (`LiveSegments`), without a segment that
    has neither a fired nor a terminal message: open rebuilds it only once it needs it."""
    life = store.opened.life
    segments = {
        seq: (bytes(s.states), list(s.times), list(s.chunks), s.left, s.acks)
        for seq, s in life.segments.items()
        if any(s.states) or any(s.chunks)
    }
    return segments, life.chunks, life.acks


@settings(max_examples=examples(120), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(operations, st.integers(0, 30))
def test_the_join_answers_what_the_operations_left(ops, reopen_at):
    """The store is closed and opened again after `reopen_at` operations: the writers'
    memory is rebuilt as it was, and the operations after it go on from it."""
    model, now_ms, before = Model(), 1_000_000, None
    with tempfile.TemporaryDirectory() as path:
        for part in (ops[:reopen_at], ops[reopen_at:]):
            with open_v2(path, retention_ms=RETENTION_MS) as store:
                if before is not None:
                    assert memory(store) == before
                writer, reader = Writer(store), BatchStateReader(store.families)
                for op in part:
                    now_ms += op[2]
                    apply(op, writer, model, now_ms)
                    check(reader, model)
                    check_counts(store, model)
                for topic in TOPICS:
                    assert pages(reader, topic, 2) == reader.list_scheduled(topic)
                before = memory(store)


def test_a_long_run_fires_acks_and_sweeps_every_message():
    """Without hypothesis' shrinking: many segments through their whole life."""
    with tempfile.TemporaryDirectory() as path, open_v2(path, retention_ms=RETENTION_MS) as store:
        writer, model, reader = (
            Writer(store),
            Model(),
            BatchStateReader(store.families),
        )
        now_ms = 1_000_000
        for round_ in range(12):
            now_ms += 700
            messages = [(TOPICS[i % 2], (i * 397) % 3_000) for i in range(40)]
            model.send(writer.send(messages, now_ms), messages, now_ms)
            writer.fire(now_ms, 25)
            model.fire(now_ms, 25)
            fired = [t.message_id for t in model.timers.values() if t.state is State.FIRED]
            if round_ % 3 == 2 and fired:  # a Nack's delay: the second or the minute wheel
                delay = 50 if round_ % 2 else 1_200
                writer.move(fired[0], now_ms + delay, delay)
                model.move(fired[0], now_ms + delay)
                fired = fired[1:]
            if fired:
                writer.ack(fired[: len(fired) // 2 + 1], now_ms)
                for message_id in fired[: len(fired) // 2 + 1]:
                    model.settle(message_id, State.ACKED, now_ms)
            check(reader, model)
        # Into the minute wheel once no send comes after: only the move's word to the fire
        # (`SegmentFirer.placed`) has the minute it fell in walked again.
        moving = next(t.message_id for t in model.timers.values() if t.state is State.FIRED)
        writer.move(moving, now_ms + 1_200, 1_200)
        model.move(moving, now_ms + 1_200)
        while any(t.state is not State.ACKED for t in model.timers.values()):
            now_ms += 500
            writer.fire(now_ms, 1_000)
            model.fire(now_ms, 1_000)
            fired = sorted(t.message_id for t in model.timers.values() if t.state is State.FIRED)
            if fired:
                writer.ack(fired, now_ms)
                for message_id in fired:
                    model.settle(message_id, State.ACKED, now_ms)
        check(reader, model)
        check_counts(store, model)
        now_ms += RETENTION_MS
        writer.sweep(now_ms)
        model.sweep(now_ms)
        assert model.timers == {}
        check(reader, model)
        assert all(
            dict(store.families[name].items()) == {}
            for name in ("segments", "acked", "ready", "segstate")
        )
