"""At-least-once delivery of fired timers to a topic's subscribers (queue semantics).

The durable truth is the engine's `ready` column family: a fired, un-acked message stays
there until it is acked. This module only decides *who* gets *what* next, in memory:

* One `_Topic` dispatcher per topic keeps a cursor (the last fire sequence it read) and
  pulls newly fired messages with `engine.fetch_fired(topic, cursor, n)` when the engine's
  fired-listener says the topic fired (a "dirty" flag), and only as many as subscribers
  can take: memory is bounded by the subscribers' `max_in_flight`, never by the backlog.
* Each fetched message is an `_Entry`: queued, or in flight at one subscriber with an ack
  deadline. A batch handed out shares one deadline, kept in a FIFO (the ack timeout is a
  constant, so deadlines come in order): expiry is one deque pop per batch, not a heap.
* Redelivery: when the deadline passes without an ack, when the subscriber's stream
  ends, or when a client nacks it, an un-acked entry has failed an attempt. Every failed
  attempt goes through one function, `server.attempts.fail`: the entry goes to the front
  (`redeliver`) with `attempt + 1`, or, for a nack with a backoff, into `delayed` until
  its time comes, or, out of attempts, to its dead-letter topic.
* Several subscribers of one topic share one dispatcher: each message is in flight at one
  subscriber at a time; whoever has room takes the next batch.
* After a restart, the cursor starts at 0, so every fired-but-unacked message (the
  engine's `ready_topics()`) is delivered again. Attempt counts live in memory and so
  start again at 1 after a restart.

The engine calls the fired-listener on its writer thread after each commit; it only puts
the topics on a queue read by this module's own thread, which marks the dispatchers dirty
and wakes their subscribers, so the writer never waits on a delivery lock.

Backpressure on the fired, un-acked backlog is the engine's (`Engine.check_backlog`): the
engine sees every fire and every ack, wherever the hub runs.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import structlog

from engine import metrics
from engine.engine import Engine
from server import attempts
from server.delivery_trace import DeliveryTrace
from server.limits import PerKeyLimit
from server.subscriber import Delivered, Subscriber
from wheels.domain import FiredTimer, InvalidArgument, Overloaded, ShuttingDown
from wheels.settings import Settings
from wheels.validation import validate_nack, validate_topic

log = structlog.get_logger("timerwheel.delivery")

MAX_FETCH = 5_000  # messages read from the store per refill, at most
IDLE_WAKE_S = 1.0  # a waiting subscriber re-checks its stream at least this often


def monotonic_ms() -> int:
    return time.monotonic_ns() // 1_000_000


@dataclass(eq=False, slots=True)
class _Entry:
    fired: FiredTimer
    attempt: int = 1  # the attempt number of its next (or current) delivery
    owner: Subscriber | None = None
    deadline_ms: int = 0


class _Topic:
    """The dispatcher of one topic; every field is guarded by `cond`."""

    def __init__(self, name: str, hub: DeliveryHub) -> None:
        self.name = name
        self.hub = hub
        self.cond = threading.Condition()
        self.cursor = 0  # last fire sequence read from the store
        self.dirty = True  # the store may hold fired messages after the cursor
        self.entries: dict[str, _Entry] = {}
        self.fresh: deque[str] = deque()
        self.redeliver: deque[str] = deque()
        self.deadlines: deque[tuple[int, Subscriber, list[str]]] = deque()
        self.delayed: list[tuple[int, str]] = []  # heap of (redeliver at ms, id): nack backoff
        self.dying: list[tuple[str, _Entry, str]] = []  # out of attempts: (id, entry, reason)
        self.subscribers = 0
        self.held_bytes = 0  # bodies of `entries`, counted in the hub's budget too

    # -- called with cond held ------------------------------------------------------------
    def expire(self, now_ms: int) -> None:
        """Entries whose ack deadline passed have failed an attempt; nack backoffs that
        ended go back to the front."""
        while self.deadlines and self.deadlines[0][0] <= now_ms:
            deadline_ms, owner, ids = self.deadlines.popleft()
            for message_id in ids:
                entry = self.entries.get(message_id)
                if entry is not None and entry.owner is owner and entry.deadline_ms == deadline_ms:
                    attempts.fail(self, entry, message_id, reason="ack timeout")
        attempts.backoffs_ended(self, now_ms)

    def release(self, subscriber: Subscriber) -> int:
        """A stream ended: everything it had in flight is redelivered at once."""
        count = 0
        for message_id, entry in list(self.entries.items()):  # fail() may remove entries
            if entry.owner is subscriber:
                attempts.fail(self, entry, message_id, reason="stream ended")
                count += 1
        return count

    def refill(self, wanted: int) -> None:
        """Read newly fired messages from the store when it may have some and room exists:
        room for `wanted` more, and bytes in the hub's budget (a topic holding nothing may
        read one message whatever its size). Reads go on while they return something,
        since a read cut at its byte budget leaves more behind."""
        settings = self.hub.settings
        while self.dirty and len(self.fresh) < wanted:
            room_bytes = self.hub.delivery_room_bytes()
            if room_bytes <= 0 and self.entries:
                return  # the hub holds its budget: acks will free it (dirty stays set)
            limit = min(max(wanted - len(self.fresh), settings.delivery_batch_max), MAX_FETCH)
            max_bytes = max(min(room_bytes, settings.delivery_batch_bytes), 1)
            fetched = self.hub.engine.fetch_fired(self.name, self.cursor, limit, max_bytes)
            self.dirty = bool(fetched)
            new = []
            for fired in fetched:
                message_id = fired.timer.message_id
                if message_id not in self.entries:
                    new.append((message_id, self.track(message_id, _Entry(fired))))
            self.fresh.extend(m for m, _ in self.hub.restore_attempts(self, new))
            if fetched:
                self.cursor = fetched[-1].seq

    def track(self, message_id: str, entry: _Entry) -> _Entry:
        self.entries[message_id] = entry
        size = len(entry.fired.timer.body)
        self.held_bytes += size
        self.hub.hold_delivery_bytes(size)
        return entry

    def untrack(self, message_id: str) -> _Entry | None:
        """Stop tracking an entry (acked, dead, gone): its bytes leave the budget."""
        entry = self.entries.pop(message_id, None)
        if entry is not None:
            size = len(entry.fired.timer.body)
            self.held_bytes -= size
            self.hub.hold_delivery_bytes(-size)
        return entry

    def take(self, subscriber: Subscriber, room: int, now_ms: int) -> list[Delivered]:
        """Up to `room` messages (redeliveries first) for `subscriber`, within batch limits."""
        settings = self.hub.settings
        room = min(room, settings.delivery_batch_max)
        deadline_ms = now_ms + settings.ack_timeout_ms
        batch: list[Delivered] = []
        ids: list[str] = []
        body_bytes = 0
        for source in (self.redeliver, self.fresh):
            while source and len(batch) < room and body_bytes < settings.delivery_batch_bytes:
                message_id = source.popleft()
                entry = self.entries.get(message_id)
                if entry is None or entry.owner is not None:
                    continue  # acked meanwhile, or a stale queue slot
                entry.owner = subscriber
                entry.deadline_ms = deadline_ms
                batch.append(Delivered(entry.fired, entry.attempt))
                ids.append(message_id)
                body_bytes += len(entry.fired.timer.body)
        if ids:
            subscriber.in_flight += len(ids)
            self.deadlines.append((deadline_ms, subscriber, ids))
            self.hub.trace.delivered(ids, [d.attempt for d in batch], subscriber.name)
            recorder = metrics.recorder()
            if recorder.enabled:
                recorder.delivered(batch, metrics.wall_ms() + settings.clock_offset_ms)
        return batch

    def forget(self, message_ids: list[str]) -> None:
        """Acked: stop tracking (and free the owner's room)."""
        for message_id in message_ids:
            entry = self.untrack(message_id)
            if entry is not None and entry.owner is not None:
                entry.owner.in_flight -= 1

    def wait_s(self, now_ms: int, until_s: float) -> float:
        """How long a subscriber may sleep: to its stream check or the next ack deadline."""
        wait = until_s - time.monotonic()
        if self.deadlines:
            wait = min(wait, (self.deadlines[0][0] - now_ms) / 1000)
        if self.delayed:
            wait = min(wait, (self.delayed[0][0] - now_ms) / 1000)
        return max(wait, 0.0)


class DeliveryHub:
    """All topics' dispatchers, the subscriber count and the un-acked backlog count."""

    def __init__(
        self,
        engine: Engine,
        settings: Settings,
        now_ms: Callable[[], int] = monotonic_ms,
        *,
        background: bool = True,
    ) -> None:
        """`background=False` (tests, with an engine made the same way) marks fired topics
        dirty on the caller's thread, so a test in virtual time sees every fire at once;
        a server keeps them off the writer's thread (see the module docstring)."""
        self.engine = engine
        self.settings = settings
        self._now_ms = now_ms
        self._lock = threading.Lock()
        self._topics: dict[str, _Topic] = {}
        self._subscribers = 0
        limit = settings.max_subscribers_per_peer
        self._per_caller = PerKeyLimit(limit, "max_subscribers_per_peer")
        self._closed = False
        self._fired: queue.SimpleQueue[set[str] | None] = queue.SimpleQueue()
        self.trace = DeliveryTrace(engine)
        self._held_bytes = 0  # bodies all dispatchers track (Settings.max_delivery_bytes)
        self._held_lock = threading.Lock()
        # Messages fired before this instant may have been delivered by an earlier hub
        # (before a restart): their attempt counts are read back (restore_attempts).
        self._started_at_ms = engine.now_ms()
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
            dispatcher = self._topic(topic)
            with dispatcher.cond:  # under _lock: an idle dispatcher is not freed meanwhile
                dispatcher.subscribers += 1
                subscriber._dispatcher = dispatcher
        return subscriber

    def next_batch(
        self, subscriber: Subscriber, timeout_s: float = IDLE_WAKE_S
    ) -> list[Delivered] | None:
        """The next batch for `subscriber`, waiting up to `timeout_s` for one.

        Returns [] on timeout (the caller checks its stream and calls again), None once the
        subscriber is closed; raises ShuttingDown when the hub is closed. Never returns more
        than the subscriber's room (max_in_flight minus what it has in flight).
        """
        dispatcher = subscriber._dispatcher
        assert dispatcher is not None, "subscribe() first"
        try:
            return self._next_batch(dispatcher, subscriber, timeout_s)
        finally:
            self.trace.flush()  # first: a failed attempt is traced before its dead-lettering
            if dispatcher.dying:  # ack timeouts that ran out of attempts
                attempts.move_dead_letters(self.engine, dispatcher)

    def _next_batch(
        self, dispatcher: _Topic, subscriber: Subscriber, timeout_s: float
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
                room = subscriber.max_in_flight - subscriber.in_flight
                if room > 0:
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
            self._per_caller.release(subscriber.identity)
            self._free_if_idle(dispatcher)
        self.trace.flush()
        if dispatcher.dying:
            attempts.move_dead_letters(self.engine, dispatcher)
        if returned:
            log.info("subscriber_left_unacked", topic=subscriber.topic, redelivered=returned)

    # -- acking -----------------------------------------------------------------------------
    def ack(self, topic: str, message_ids: list[str]) -> int:
        """Ack durably (engine), then stop tracking; returns how many were FIRED and now ACKED."""
        acked = self.engine.ack(topic, message_ids)
        with self._lock:
            dispatcher = self._topics.get(topic)
        if dispatcher is not None:
            with dispatcher.cond:
                dispatcher.forget(message_ids)
                dispatcher.cond.notify_all()  # room freed
            with self._lock:
                self._free_if_idle(dispatcher)
        return len(acked)

    def nack(
        self, topic: str, message_ids: list[str], reason: str = "", redeliver_after_ms: int = 0
    ) -> tuple[int, int]:
        """Give in-flight messages back as failed attempts: (how many were in flight, how
        many of those reached their max_attempts and were dead-lettered).

        Redelivered at once, or `redeliver_after_ms` later (held in memory: after a
        restart every un-acked message is delivered again at once anyway).
        """
        validate_topic(topic, self.settings)
        validate_nack(message_ids, reason, redeliver_after_ms, self.settings)
        with self._lock:
            dispatcher = self._topics.get(topic)
        if dispatcher is None:
            return 0, 0
        with dispatcher.cond:
            redeliver_at_ms = self._now_ms() + redeliver_after_ms if redeliver_after_ms else 0
            nacked, dead = attempts.nack(dispatcher, message_ids, redeliver_at_ms, reason)
            if nacked:
                dispatcher.cond.notify_all()
        self.trace.flush()
        if dead:
            attempts.move_dead_letters(self.engine, dispatcher)
        return nacked, dead

    def hold_delivery_bytes(self, size: int) -> None:
        with self._held_lock:
            self._held_bytes += size

    def delivery_room_bytes(self) -> int:
        """What the dispatchers may still read before they hold `max_delivery_bytes`."""
        with self._held_lock:
            return self.settings.max_delivery_bytes - self._held_bytes

    @property
    def held_bytes(self) -> int:
        with self._held_lock:
            return self._held_bytes

    def restore_attempts(
        self, dispatcher: _Topic, new: list[tuple[str, _Entry]]
    ) -> list[tuple[str, _Entry]]:
        """Entries read from the store, with the attempt counts of earlier deliveries
        (from their traces) carried on: the next attempt after n delivered is n + 1, and
        one already at its last allowed attempt goes to its dead-letter topic. Returns
        the entries to deliver. Call with the dispatcher's lock held."""
        older = [m for m, e in new if e.fired.timer.fired_at_ms <= self._started_at_ms]
        made = self.engine.delivery_attempts(older) if older else {}
        if not made:
            return new
        deliver = []
        for message_id, entry in new:
            if message_id in made:
                entry.attempt = made[message_id]
                limit = self.engine.max_attempts(message_id)
                if limit and entry.attempt >= limit:
                    dispatcher.untrack(message_id)
                    reason = "attempts used up before a restart"
                    dispatcher.dying.append((message_id, entry, reason))
                    continue
                entry.attempt += 1
            deliver.append((message_id, entry))
        return deliver

    def unacked(self) -> int:
        """Fired, not yet acked messages, service-wide."""
        return self.engine.unacked()

    def subscriber_count(self) -> int:
        with self._lock:
            return self._subscribers

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
            self.trace.flush()  # the last attempts, so a restart carries them on
            unacked: int | None = self.unacked()
        except ShuttingDown:  # the engine (another process) is already gone
            unacked = None
        log.info("delivery_stopped", unacked=unacked)

    def _topic(self, name: str) -> _Topic:
        """The dispatcher of `name` (call with `_lock` held, or before threads start)."""
        dispatcher = self._topics.get(name)
        if dispatcher is None:
            dispatcher = self._topics[name] = _Topic(name, self)
        return dispatcher

    def topic_count(self) -> int:
        """Dispatchers held: topics with subscribers or messages still tracked."""
        with self._lock:
            return len(self._topics)

    def _free_if_idle(self, dispatcher: _Topic) -> None:
        """Drop a dispatcher nobody subscribes to and that tracks nothing (call with
        `_lock` held), so topics once used do not hold memory forever. A later subscriber
        gets a new one whose cursor starts at 0: the store's `ready` entries of the topic
        are exactly the un-acked messages, so nothing is skipped."""
        with dispatcher.cond:
            idle = not (dispatcher.subscribers or dispatcher.entries or dispatcher.dying)
        if idle and self._topics.get(dispatcher.name) is dispatcher:
            del self._topics[dispatcher.name]

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
