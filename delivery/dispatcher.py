"""The dispatcher of one topic: which fired message goes to which subscriber next.

`DeliveryHub` (timerwheel.delivery.hub) holds one `TopicDispatcher` per topic that has
subscribers or tracked messages. It works in memory only; the durable truth is the
engine's `ready` column family, which keeps a fired message until it is acked. It calls
back into its hub for the byte budget every dispatcher shares (`hub.budget`,
`timerwheel.delivery.budget`) and for the attempt counts of messages an earlier hub may have
delivered (`hub.attempt_policy`, timerwheel.delivery.attempt_policy).

* A dispatcher keeps a cursor (the last fire sequence it read) and pulls newly fired
  messages with `engine.fetch_deliveries(topic, cursor, n)` when the engine's fired-listener
  says the topic fired (a "dirty" flag), and only as many as subscribers can take:
  memory is bounded by the subscribers' `max_in_flight`, never by the backlog.
* Each fetched message is an `Entry`: queued, or in flight at one subscriber with an ack
  deadline. A batch handed out shares one deadline, kept in a FIFO (the ack timeout is a
  constant, so deadlines come in order): expiry is one deque pop per batch, not a heap.
* Redelivery: when the deadline passes without an ack, when the subscriber's stream
  ends, or when a client nacks it, an un-acked entry has failed an attempt. A release (a
  Nack with `release`, from a consumer that is stopping) is not one: `attempts.release`
  puts the entry back at the front as it was. Every failed
  attempt goes through one function, `timerwheel.delivery.attempts.fail`: the entry goes to the
  front (`redeliver`) with `attempt + 1` (an ended stream), or into `delayed` until its retry
  backoff ends (an ack timeout, a nack: `timerwheel.wheels.retry`), or, out of attempts, to
  its dead-letter topic.
* An Ack gives its subscriber the room back as it arrives (`settle`); the messages stay
  tracked until the engine has made the ack durable, and go back in flight if it fails.
* Several subscribers of one topic share one dispatcher: each message is in flight at one
  subscriber at a time; whoever has room takes the next batch.
* A subscriber that a batch filled waits, while more is queued, until a quarter of its
  window is free again (`holds_back`, `reopen_room`), not for each Ack's worth: TCP's
  silly-window avoidance, so a consumer a window behind is handed large batches.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from timerwheel.delivery import attempts
from timerwheel.delivery.subscriber import Delivered, Subscriber
from timerwheel.observability import metrics
from timerwheel.store.fired_record import FiredRecord
from timerwheel.store.records import record_body_bytes
from timerwheel.wheels.retry import RetryPolicy

if TYPE_CHECKING:
    from timerwheel.delivery.hub import DeliveryHub

MAX_FETCH = 5_000  # messages read from the store per refill, at most


@dataclass(eq=False, slots=True)
class Entry:
    """One tracked message: waiting (queued, or in a nack's backoff) while `owner` is
    None, else in flight at `owner` until `deadline_ms`; owned by nobody and in no queue
    while an Ack of it is being made durable (`settle`)."""

    fired: FiredRecord
    body_bytes: int  # what it counts against the hub's byte budget (its body's size)
    limit: int  # the delivery attempts it may have (0: no limit), known when it is fetched
    # Its retry policy, its send's or its topic's (None: the server's), ditto.
    retry: RetryPolicy | None = None
    attempt: int = 1  # the attempt number of its next (or current) delivery
    owner: Subscriber | None = None
    deadline_ms: int = 0  # 0 until `take` first hands it out


def reopen_room(max_in_flight: int, batch_max: int) -> int:
    """The room a subscriber that was full waits for before its next batch (while that
    many messages are waiting): a quarter of its window, at most a whole batch, at least
    one. As TCP's silly-window avoidance: handed only what each Ack freed, a consumer
    that reads one batch per Ack round trip, once a window behind, gets batches as small
    as its acks for good and drains a backlog at a few messages a round trip."""
    return min(batch_max, max(1, max_in_flight // 4))


def unblocks(owner: Subscriber) -> bool:
    """Whether one message leaving `owner`'s flight may let its waiting stream take more:
    when it was full and this makes its free room reach `reopen_room` (`holds_back`).
    A wake that finds nothing to do still costs two thread switches and a turn of the
    GIL, and at a steady rate most acks free room in a flight that had room already, or
    too little to be handed: a wake on each of them was pure cost. An owner with room
    that was not full waits only when nothing is queued, which an ack does not change. A
    draining owner (stopping) is woken by each: its stream ends once it holds none."""
    if owner.draining:
        return True
    return owner.full and owner.max_in_flight - owner.in_flight + 1 == owner.reopen_room


def _read_all_there_was(fetched: list[FiredRecord], limit: int, max_bytes: int) -> bool:
    """Whether a read came back short: fewer than `limit`, not cut at `max_bytes`.

    Then the store most likely held nothing more when it was read (a read from RocksDB
    also skips ready keys whose record is not FIRED), and `dirty` stays set either way,
    so the next refill reads once more and finds it empty, or what fired or was left
    meanwhile: nothing rests on the guess being right. That read is not made before
    these messages are handed out: with the engine in another process it is a round trip,
    and at a high fire rate about every other read comes back empty, so each batch would
    wait for one that finds nothing (docs/lab-log.md has the probe of the path).
    """
    return len(fetched) < limit and sum(len(fired.record) for fired in fetched) < max_bytes


class TopicDispatcher:
    """The dispatcher of one topic; every field is guarded by `cond`."""

    def __init__(self, name: str, hub: DeliveryHub) -> None:
        self.name = name
        self.hub = hub
        self.cond = threading.Condition()
        self.cursor = 0  # last fire sequence read from the store
        self.dirty = True  # the store may hold fired messages after the cursor
        self.short_of_bytes = False  # the last refill stopped at the hub's byte budget
        self.entries: dict[str, Entry] = {}
        self.fresh: deque[str] = deque()
        # A message left `entries` while it waited in `fresh`: its slot there is stale.
        self.fresh_stale = False
        self.redeliver: deque[str] = deque()
        self.deadlines: deque[tuple[int, Subscriber, tuple[str, ...]]] = deque()
        self.delayed: list[tuple[int, str]] = []  # heap of (redeliver at ms, id): retry backoffs
        self.dying: list[tuple[str, Entry, str]] = []  # out of attempts: (id, entry, reason)
        self.subscribers = 0
        self.held_bytes = 0  # bodies of `entries`, counted in the hub's budget too
        # The attempt limit and retry policy (None: the server's) of this topic's messages
        # whose send names none, fixed for the dispatcher's life: a failed attempt reads
        # them from its Entry, never from the engine (timerwheel.wheels.topic_policy).
        self.default_limit, self.default_retry = hub.attempt_policy.topic_defaults(name)

    # -- called with cond held ------------------------------------------------------------
    def bind(self, subscriber: Subscriber) -> None:
        """A new subscriber of this topic."""
        self.subscribers += 1
        subscriber._dispatcher = self
        subscriber.reopen_room = reopen_room(
            subscriber.max_in_flight, self.hub.settings.delivery_batch_max
        )

    def holds_back(self, subscriber: Subscriber, room: int) -> bool:
        """Whether `subscriber`, with `room` free, waits for more room before its next
        batch: only once a batch filled it (`full`, until it is handed the next one),
        while its room is below its `reopen_room` and at least that many messages are
        waiting to be handed out (read from the store first, as for a batch). So a full
        consumer's batches stay large once a backlog formed, and nothing is held back
        that nothing more would join: a first batch, one for a subscriber that was not
        full, or one whose in_flight fell to 0 (its room is then its whole window) goes
        out at once. The count looks at most `reopen_room` queue slots, and only for a
        subscriber that was full and has little room: no work a message."""
        need = subscriber.reopen_room
        if room >= need or not subscriber.full:
            return False
        self.refill(need)
        if len(self.redeliver) + len(self.fresh) < need:
            return False
        entries = self.entries
        waiting = 0
        for source in (self.redeliver, self.fresh):
            for message_id in source:  # as `take` sees them: stale slots do not count
                entry = entries.get(message_id)
                if entry is not None and entry.owner is None:
                    waiting += 1
                    if waiting >= need:
                        return True
        return False

    def expire(self, now_ms: int) -> None:
        """Entries whose ack deadline passed have failed an attempt (and wait out their
        retry backoff); backoffs that ended go back to the front."""
        while self.deadlines and self.deadlines[0][0] <= now_ms:
            deadline_ms, owner, ids = self.deadlines.popleft()
            for message_id in ids:
                entry = self.entries.get(message_id)
                if entry is not None and entry.owner is owner and entry.deadline_ms == deadline_ms:
                    attempts.fail(self, entry, message_id, reason="ack timeout", now_ms=now_ms)
        attempts.backoffs_ended(self, now_ms)

    def release(self, subscriber: Subscriber) -> int:
        """A stream ended: everything it had in flight is redelivered at once (a failed
        attempt, but no backoff: the consumer went away, the messages did nothing wrong)."""
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
        since a read cut at its byte budget leaves more behind, until a read comes back
        short (`_read_all_there_was`): the read that would find the store empty is left to
        the subscriber's next call, so these messages are not held behind it. `fresh`
        counts as what `take` will hand out, so its stale slots go first."""
        settings = self.hub.settings
        self.stop_waiting_for_bytes()
        if self.fresh_stale:
            self._drop_stale_fresh()
        while self.dirty and len(self.fresh) < wanted:
            room_bytes = self.hub.budget.room()
            if room_bytes <= 0 and self.entries:
                if self.short_of_bytes:
                    return  # acks, of any topic, will free the budget (dirty stays set)
                self.short_of_bytes = True
                self.hub.budget.wait(self)
                continue  # look again: bytes freed before the hub knew we wait wake nobody
            self.stop_waiting_for_bytes()
            limit = min(max(wanted - len(self.fresh), settings.delivery_batch_max), MAX_FETCH)
            max_bytes = max(min(room_bytes, settings.delivery_batch_bytes), 1)
            fetched = self.hub.engine.fetch_deliveries(self.name, self.cursor, limit, max_bytes)
            self.dirty = bool(fetched)
            fresh_before = len(self.fresh)
            entries = self.entries
            own = self.hub.attempt_policy.delivery_options(fetched)
            default_limit, default_retry = self.default_limit, self.default_retry
            new = [
                (
                    fired.message_id,
                    Entry(fired, record_body_bytes(fired.record), default_limit, default_retry)
                    if not own or fired.message_id not in own
                    else self._own_entry(fired, *own[fired.message_id]),
                )
                for fired in fetched
                if fired.message_id not in entries
            ]
            self.track_many(new)
            self.fresh.extend(m for m, _ in self.hub.attempt_policy.restore_attempts(self, new))
            if fetched:
                self.cursor = fetched[-1].seq
            if len(self.fresh) > fresh_before and _read_all_there_was(fetched, limit, max_bytes):
                return

    def _drop_stale_fresh(self) -> None:
        """Drop the slots of `fresh` whose message was acked (or dead-lettered) while it
        waited there: counted as queued, they made `refill` read less and the batch come
        out short. Done once after such a removal (`fresh_stale`), not by counting the
        live slots at each refill: a consumer acks a message it was never handed only
        rarely, and a count is a lookup a queued message, a window's worth a batch."""
        entries = self.entries
        live = [
            message_id for message_id in self.fresh
            if (entry := entries.get(message_id)) is not None and entry.owner is None
        ]  # fmt: skip
        self.fresh.clear()
        self.fresh.extend(live)
        self.fresh_stale = False

    def _own_entry(self, fired: FiredRecord, limit: int | None, retry: RetryPolicy | None) -> Entry:
        """The Entry of a message with send options: each it set wins over the topic's."""
        return Entry(
            fired, record_body_bytes(fired.record),
            self.default_limit if limit is None else limit, retry or self.default_retry,
        )  # fmt: skip

    def stop_waiting_for_bytes(self) -> None:
        if self.short_of_bytes:
            self.short_of_bytes = False
            self.hub.budget.stop_waiting(self)

    def track(self, message_id: str, entry: Entry) -> None:
        self.track_many([(message_id, entry)])

    def track_many(self, new: list[tuple[str, Entry]]) -> None:
        """Hold these entries; their bodies count against the hub's budget, taken once
        for all: taking the hub's lock a message was a visible share of the GIL in a
        burst's drain."""
        size = 0
        for message_id, entry in new:
            self.entries[message_id] = entry
            size += entry.body_bytes
        self.held_bytes += size
        self.hub.budget.hold(size)

    def untrack(self, message_id: str) -> Entry | None:
        """Stop tracking an entry (acked, dead, gone): its bytes leave the budget."""
        entry = self.entries.pop(message_id, None)
        if entry is not None:
            if not entry.deadline_ms:  # never handed out: its slot in `fresh`, if any, is stale
                self.fresh_stale = True
            size = entry.body_bytes
            self.held_bytes -= size
            self.hub.budget.hold(-size)
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
                body_bytes += entry.body_bytes
        if ids:
            subscriber.in_flight += len(ids)
            subscriber.full = subscriber.in_flight >= subscriber.max_in_flight
            # A tuple of strings: the cyclic GC stops tracking it, so the thousands of
            # batches awaiting their deadline cost full collections one object each.
            self.deadlines.append((deadline_ms, subscriber, tuple(ids)))
            self.hub.trace.delivered(ids, [d.attempt for d in batch], subscriber.name)
            recorder = metrics.recorder()
            if recorder.enabled:
                recorder.delivered(batch, metrics.wall_ms() + settings.clock_offset_ms)
        return batch

    def settle(self, message_ids: list[str]) -> tuple[list[tuple[str, Subscriber]], bool]:
        """An Ack for these arrived: those in flight leave their owner (its room is free
        again) but stay tracked, owned by nobody and in no queue, so neither an ack
        deadline nor the end of the stream fails them. Returns (id, owner) of each, and
        whether a subscriber that was full has room enough for a batch now (`unblocks`)."""
        settled = []
        unblocked = False
        for message_id in message_ids:
            entry = self.entries.get(message_id)
            if entry is not None and entry.owner is not None:
                owner = entry.owner
                settled.append((message_id, owner))
                unblocked = unblocked or unblocks(owner)
                owner.in_flight -= 1
                entry.owner = None
        return settled, unblocked

    def unsettle(self, settled: list[tuple[str, Subscriber]]) -> None:
        """The Ack failed (e.g. refused as invalid): each entry is in flight at its owner
        again, under its old deadline, as if the Ack had never come."""
        for message_id, owner in settled:
            entry = self.entries.get(message_id)
            if entry is not None and entry.owner is None:
                entry.owner = owner
                owner.in_flight += 1

    def forget(self, message_ids: list[str]) -> bool:
        """Acked: stop tracking (and free the owner's room). Returns whether a waiting
        subscriber may now take more: one that was full has room enough, or bodies left the
        byte budget that the last `refill` stopped at. The bytes leave the hub's budget
        once for the whole Ack (its lock per message, as `track_many` says)."""
        wakes = False
        freed = 0
        pop = self.entries.pop
        for message_id in message_ids:
            entry = pop(message_id, None)
            if entry is not None:
                freed += entry.body_bytes
                if entry.owner is not None:
                    wakes = wakes or unblocks(entry.owner)
                    entry.owner.in_flight -= 1
                elif not entry.deadline_ms:  # acked before it was ever handed out: ditto
                    self.fresh_stale = True
        if freed:
            self.held_bytes -= freed
            self.hub.budget.hold(-freed)
        return wakes or (freed > 0 and self.short_of_bytes)

    def wait_s(self, now_ms: int, until_s: float) -> float:
        """How long a subscriber may sleep: to its stream check or the next ack deadline."""
        wait = until_s - time.monotonic()
        if self.deadlines:
            wait = min(wait, (self.deadlines[0][0] - now_ms) / 1000)
        if self.delayed:
            wait = min(wait, (self.delayed[0][0] - now_ms) / 1000)
        return max(wait, 0.0)
