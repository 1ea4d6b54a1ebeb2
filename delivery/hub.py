"""At-least-once delivery of fired timers to a topic's subscribers (queue semantics).

The durable truth is the engine's `ready` column family: a fired, un-acked message stays
there until it is acked. This module only decides *who* gets *what* next, in memory.
`DeliveryHub` is its entry point: it holds one dispatcher per topic
(`timerwheel.delivery.dispatcher.TopicDispatcher`, which describes the cursor, the ack deadlines and
redelivery), counts the subscribers (`timerwheel.delivery.subscriber.Subscriber`) against their
limits, and keeps the bodies the dispatchers hold within `Settings.max_delivery_bytes`
(`timerwheel.delivery.budget`).

After a restart, every dispatcher's cursor starts at 0, so every fired-but-unacked
message (the engine's `ready_topics()`) is delivered again; attempt counts carry on
(`timerwheel.delivery.attempt_policy`).

The engine calls the fired-listener on its writer thread after each commit; it only puts
the topics on a queue read by this module's own thread, which marks the dispatchers dirty
and wakes their subscribers, so the writer never waits on a delivery lock.

Backpressure on the fired, un-acked backlog is the engine's (`Engine.check_backlog`): the
engine sees every fire and every ack, wherever the hub runs.
"""

from __future__ import annotations

import queue
import random
import threading
import time
from collections.abc import Callable, Generator

import structlog

from timerwheel.delivery import attempts, inspect
from timerwheel.delivery.api import DeliveryApi
from timerwheel.delivery.attempt_policy import AttemptPolicy
from timerwheel.delivery.budget import DeliveryBudget
from timerwheel.delivery.dispatcher import TopicDispatcher
from timerwheel.delivery.inspect import InFlightRow, consumer_row
from timerwheel.delivery.subscriber import Delivered, DeliveryRow, Subscriber, as_rows
from timerwheel.delivery.trace import DeliveryTrace
from timerwheel.engine.api import FiredSource
from timerwheel.security.limits import PerKeyLimit
from timerwheel.wheels.domain import InvalidArgument, Overloaded, ShuttingDown
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.validation import validate_nack, validate_topic

# Delivered and Subscriber live in timerwheel.delivery.subscriber; importers take them from here.
__all__ = ["IDLE_WAKE_S", "Delivered", "DeliveryHub", "Subscriber"]

log = structlog.get_logger("timerwheel.delivery")

IDLE_WAKE_S = 1.0  # a waiting subscriber re-checks its stream at least this often


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


class DeliveryHub(DeliveryApi[Subscriber]):
    """All topics' dispatchers, the subscriber count and the un-acked backlog count."""

    def __init__(
        self,
        engine: FiredSource,
        settings: Settings,
        now_ms: Callable[[], int] = monotonic_ms,
        *,
        background: bool = True,
        random01: Callable[[], float] = random.random,
    ) -> None:
        """`background=False` (tests, with an engine made the same way) marks fired topics
        dirty on the caller's thread, so a test in virtual time sees every fire at once;
        a server keeps them off the writer's thread (see the module docstring).
        `random01` draws the retry backoffs' jitter (`AttemptPolicy`)."""
        self.engine = engine
        self.settings = settings
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._topics: dict[str, TopicDispatcher] = {}
        self._subscribers = 0
        self._streams: dict[Subscriber, None] = {}  # live streams, in order, for Consumers
        limit = settings.max_subscribers_per_peer
        self._per_caller = PerKeyLimit(limit, "max_subscribers_per_peer")
        self._closed = False
        self._fired: queue.SimpleQueue[set[str] | None] = queue.SimpleQueue()
        self.trace = DeliveryTrace(
            engine, settings.trace_first_deliveries, settings.first_delivery_hold_ms,
            engine.local_now_ms,
        )  # fmt: skip
        self.budget = DeliveryBudget(settings.max_delivery_bytes)  # the bodies dispatchers hold
        # limits, backoffs, and the attempt counts of messages an earlier hub delivered
        self.attempt_policy = AttemptPolicy(engine, settings, random01)
        recovered = engine.ready_topics()
        for topic in recovered:
            self._topic(topic)
        self._thread: threading.Thread | None = None
        if background:
            engine.add_fired_listener(self._fired.put)
            self._thread = threading.Thread(
                target=self._run, name="timerwheel-delivery", daemon=True
            )
            self._thread.start()
        else:
            engine.add_fired_listener(self._mark_dirty)
        log.info("delivery_started", recovered_topics=len(recovered), unacked=engine.unacked())

    # -- subscribing ----------------------------------------------------------------------
    def subscribe(
        self, topic: str, max_in_flight: int, identity: str = "", name: str = ""
    ) -> Subscriber:
        """A new stream of `topic` for the caller `identity`, shown in traces as `name`;
        Overloaded beyond `max_subscribers` in all or `max_subscribers_per_peer` for this
        caller."""
        validate_topic(topic, self.settings)
        limit = self.settings.max_in_flight_limit
        if not 0 <= max_in_flight <= limit:
            raise InvalidArgument(
                "max_in_flight", max_in_flight, f"must be 0..{limit} (0 means the default)"
            )
        default = self.settings.max_in_flight_default
        subscriber = Subscriber(topic, max_in_flight or default, identity, name or identity)
        subscriber.connected_at_ms = self.engine.local_now_ms()
        with self._lock:
            if self._closed:
                raise ShuttingDown("the server is shutting down")
            if self._subscribers >= self.settings.max_subscribers:
                raise Overloaded(
                    f"subscribers={self._subscribers}: the server serves at most "
                    f"{self.settings.max_subscribers} Subscribe streams; retry later"
                )
            self._per_caller.acquire(identity, "Subscribe")
            self._subscribers += 1
            self._streams[subscriber] = None
            dispatcher = self._topic(topic)
            with dispatcher.cond:  # under _lock: an idle dispatcher is not freed meanwhile
                dispatcher.bind(subscriber)
        return subscriber

    def next_batch(
        self, subscriber: Subscriber, timeout_s: float = IDLE_WAKE_S
    ) -> list[Delivered] | None:
        """The next batch for `subscriber`, waiting up to `timeout_s` for one.

        Returns [] on timeout (the caller checks its stream and calls again), None once the
        subscriber is closed, or is draining (its consumer released messages: it is
        stopping) and holds nothing in flight; raises ShuttingDown when the hub is closed.
        Never returns more than the subscriber's room (max_in_flight minus what it has in
        flight), nothing to a draining one, and, once it was full, no batch smaller than
        its `reopen_room` while more is waiting (`TopicDispatcher.holds_back`).

        A draining stream ends by itself, in order after every batch it was sent, so a
        consumer that reads it to its end has seen each message it was given, released
        those it did not start, and nothing it never saw is failed as the stream ends.
        """
        dispatcher = subscriber._dispatcher
        assert dispatcher is not None, "subscribe() first"
        try:
            return self._next_batch(dispatcher, subscriber, timeout_s)
        finally:
            self.trace.flush()  # first: a failed attempt is traced before its dead-lettering
            if dispatcher.dying:  # ack timeouts that ran out of attempts
                attempts.move_dead_letters(self.engine, dispatcher)

    def batches(self, subscriber: Subscriber) -> Generator[list[DeliveryRow], None, None]:
        """`next_batch` after `next_batch` until the subscriber is closed, as rows: []
        every `IDLE_WAKE_S` with nothing to deliver, so the stream can check on its client.
        The Subscribe stream reads this, in process or across processes
        (`timerwheel.procs.remote_hub.RemoteHub.batches`, which reads one batch ahead)."""
        while (batch := self.next_batch(subscriber)) is not None:
            yield as_rows(batch)

    def _next_batch(
        self, dispatcher: TopicDispatcher, subscriber: Subscriber, timeout_s: float
    ) -> list[Delivered] | None:
        until_s = time.monotonic() + timeout_s
        with dispatcher.cond:
            while True:
                if self._closed:
                    raise ShuttingDown("the server is shutting down")
                if subscriber.closed:
                    return None
                now_ms = self._now_ms()
                dispatcher.expire(now_ms)
                if subscriber.draining:  # stopping: hand it nothing; end once it holds none
                    if subscriber.in_flight <= 0:
                        return None
                    room = 0
                else:
                    room = subscriber.max_in_flight - subscriber.in_flight
                if room > 0 and not dispatcher.holds_back(subscriber, room):
                    dispatcher.refill(room)
                    batch = dispatcher.take(subscriber, room, now_ms)
                    if batch:
                        if dispatcher.redeliver or dispatcher.fresh:
                            dispatcher.cond.notify_all()  # more for the other subscribers
                        return batch
                wait = dispatcher.wait_s(now_ms, until_s)
                if wait <= 0 and time.monotonic() >= until_s:
                    return []
                dispatcher.cond.wait(wait)

    def release(self, subscriber: Subscriber) -> None:
        """The stream ended (any way): redeliver what it had in flight, at once."""
        dispatcher = subscriber._dispatcher
        if dispatcher is None:
            return
        subscriber._dispatcher = None
        with dispatcher.cond:
            subscriber.closed = True
            dispatcher.subscribers -= 1
            returned = dispatcher.release(subscriber)
            if returned:
                dispatcher.cond.notify_all()
        with self._lock:
            self._subscribers -= 1
            self._streams.pop(subscriber, None)
            self._per_caller.release(subscriber.identity)
            self._free_if_idle(dispatcher)
        self.trace.flush()
        if dispatcher.dying:
            attempts.move_dead_letters(self.engine, dispatcher)
        if returned:
            log.info("subscriber_left_unacked", topic=subscriber.topic, redelivered=returned)

    # -- acking -----------------------------------------------------------------------------
    def ack(self, topic: str, message_ids: list[str]) -> int:
        """Ack durably (engine), then stop tracking; returns how many were FIRED and now ACKED.

        The subscribers get their room back when the Ack arrives, not once it is durable
        (`TopicDispatcher.settle`): a consumer acks one call at a time, so with the room
        held through the engine's group commit and fsync, a slow ack (hundreds of ms with
        the writer at its ceiling) stalled delivery to a consumer whose `max_in_flight`
        was all in that ack, and the delivery tail became the acks' latency (docs/lab-log.md
        has the runs). The messages stay tracked until the ack is durable; if it fails
        they are in flight at their subscriber again, as before it.
        """
        with self._lock:
            arrived_at = self._topics.get(topic)
        settling: list[tuple[str, Subscriber]] = []
        if arrived_at is not None:
            with arrived_at.cond:
                settling, unblocked = arrived_at.settle(message_ids)
                if unblocked:
                    arrived_at.cond.notify_all()  # room for a subscriber that had none
        first_deliveries = self.trace.take_for_ack(message_ids)
        try:
            acked = self.engine.ack(topic, message_ids, first_deliveries)
        except BaseException:
            if settling:
                with arrived_at.cond:
                    arrived_at.unsettle(settling)
            self.trace.ack_failed(message_ids, first_deliveries)
            raise
        if first_deliveries and len(acked) != len(message_ids):  # some were not acked
            self.trace.ack_failed(message_ids, first_deliveries, acked)
        with self._lock:
            dispatcher = self._topics.get(topic)
        if dispatcher is not None:
            with dispatcher.cond:
                held_before = dispatcher.held_bytes
                if dispatcher.forget(message_ids):
                    dispatcher.cond.notify_all()
                freed = dispatcher.held_bytes < held_before
            if freed:
                self.budget.wake_others(dispatcher)
            with self._lock:
                self._free_if_idle(dispatcher)
        return len(acked)

    def write_trace(self, message_ids: list[str]) -> None:
        """Hand the engine every delivery event noted so far and the first deliveries of
        `message_ids` held for their Ack: a `Get` with the trace reads them next."""
        self.trace.write_now(message_ids)

    def nack(
        self, topic: str, message_ids: list[str], reason: str = "", redeliver_after_ms: int = 0,
        release: bool = False,
    ) -> tuple[int, int]:  # fmt: skip
        """Give in-flight messages back as failed attempts: (how many were in flight, how
        many of those reached their max_attempts and were dead-lettered).

        Redelivered `redeliver_after_ms` later if given, else after the message's retry
        backoff (`timerwheel.wheels.retry`; held in memory: after a restart every un-acked
        message is delivered again at once anyway).

        `release`: their consumer never started them (it is stopping): not failed
        attempts (`attempts.release`): redelivered at once, to the other subscribers, as
        the same attempt; never dead-lettered, so (released, 0).
        """
        validate_topic(topic, self.settings)
        validate_nack(message_ids, reason, redeliver_after_ms, self.settings, release)
        with self._lock:
            dispatcher = self._topics.get(topic)
        if dispatcher is None:
            return 0, 0
        if release:
            with dispatcher.cond:
                released = attempts.release(dispatcher, message_ids)
                if released:
                    dispatcher.cond.notify_all()  # others take them; the owner may end
            return released, 0
        with dispatcher.cond:
            now_ms = self._now_ms()
            redeliver_at_ms = now_ms + redeliver_after_ms if redeliver_after_ms else 0
            nacked, dead = attempts.nack(dispatcher, message_ids, redeliver_at_ms, reason, now_ms)
            if nacked:
                dispatcher.cond.notify_all()
        self.trace.flush()
        if dead:
            attempts.move_dead_letters(self.engine, dispatcher)
        return nacked, dead

    def unacked(self) -> int:
        """Fired, not yet acked messages, service-wide."""
        return self.engine.unacked()

    def subscriber_count(self) -> int:
        with self._lock:
            return self._subscribers

    # -- for an operator (timerwheel.delivery.inspect) --------------------------------------
    def in_flight(self, topic: str, limit: int) -> tuple[list[InFlightRow], int, int]:
        """(up to `limit` messages the hub tracks for `topic`, how many it tracks, the
        topic's subscribers)."""
        validate_topic(topic, self.settings)
        with self._lock:
            dispatcher = self._topics.get(topic)
        return inspect.in_flight_rows(dispatcher, self._now_ms(), limit)

    def consumers(self, topic: str = "") -> list[dict]:
        """The live Subscribe streams of `topic` (empty: of every topic)."""
        with self._lock:
            streams = [s for s in self._streams if not topic or s.topic == topic]
        return [consumer_row(s) for s in streams]

    def oldest_fired_at(self, topics: list[str]) -> dict[str, int]:
        """When each topic's oldest fired, un-acked message fired (topics with one)."""
        return inspect.oldest_fired_at(self.engine, topics)

    # -- lifecycle --------------------------------------------------------------------------
    def close(self) -> None:
        """End every Subscribe stream (they see ShuttingDown). Un-acked stay in the store."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            topics = list(self._topics.values())
        for dispatcher in topics:
            with dispatcher.cond:
                dispatcher.cond.notify_all()
        if self._thread is not None:
            self._fired.put(None)
            self._thread.join(timeout=5)
        try:
            self.trace.flush(everything=True)  # the last attempts, so a restart carries them on
            unacked: int | None = self.unacked()
        except ShuttingDown:  # the engine (another process) is already gone
            unacked = None
        log.info("delivery_stopped", unacked=unacked)

    def _topic(self, name: str) -> TopicDispatcher:
        """The dispatcher of `name` (call with `_lock` held, or before threads start)."""
        dispatcher = self._topics.get(name)
        if dispatcher is None:
            dispatcher = self._topics[name] = TopicDispatcher(name, self)
        return dispatcher

    def topic_count(self) -> int:
        """Dispatchers held: topics with subscribers or messages still tracked."""
        with self._lock:
            return len(self._topics)

    def _free_if_idle(self, dispatcher: TopicDispatcher) -> None:
        """Drop a dispatcher nobody subscribes to and that tracks nothing (call with
        `_lock` held), so topics once used do not hold memory forever. A later subscriber
        gets a new one whose cursor starts at 0: the store's `ready` entries of the topic
        are exactly the un-acked messages, so nothing is skipped."""
        with dispatcher.cond:
            idle = not (dispatcher.subscribers or dispatcher.entries or dispatcher.dying)
        if idle and self._topics.get(dispatcher.name) is dispatcher:
            del self._topics[dispatcher.name]
            self.budget.stop_waiting(dispatcher)

    def _run(self) -> None:
        """Fired topics from the writer -> dirty dispatchers, subscribers woken."""
        while True:
            topics = self._fired.get()
            if topics is None:
                return
            self._mark_dirty(topics)

    def _mark_dirty(self, topics: set[str]) -> None:
        """These topics fired: their dispatchers read the store again, subscribers wake."""
        with self._lock:
            dispatchers = [self._topics[t] for t in topics if t in self._topics]
        for dispatcher in dispatchers:
            with dispatcher.cond:
                dispatcher.dirty = True
                dispatcher.cond.notify_all()
