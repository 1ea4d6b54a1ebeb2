"""Failed delivery attempts, in one place: ack timeouts, ended streams and nacks
(and `release`, the one way back that is not a failed attempt).

A dispatcher (`timerwheel.delivery.dispatcher.TopicDispatcher`) calls `fail` with its lock held for
each in-flight entry whose attempt failed. The entry leaves its owner and, by its limit
(`Entry.limit`, read when it was fetched: the message's max_attempts, else
`Settings.max_attempts`; 0: no limit; no call to the engine here), is either
delivered again with `attempt + 1` (after its retry backoff, `Entry.retry` or the
server's `Settings.retry_policy`, or a nack's own `redeliver_after_ms`, kept in the
dispatcher's `delayed` heap; at once after an ended stream) or, when this was its last
allowed attempt, queued in `dying`. `move_dead_letters` then hands those to the engine
without the lock (the engine may be another process, and the move waits for its group
commit). Attempt counts live in memory, and in each message's trace
(timerwheel.delivery.trace), from which a restarted hub carries them on.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

import structlog

from timerwheel.wheels.domain import Overloaded, ShuttingDown

if TYPE_CHECKING:
    from timerwheel.delivery.dispatcher import Entry, TopicDispatcher

log = structlog.get_logger("timerwheel.delivery")


def fail(
    topic: TopicDispatcher,
    entry: Entry,
    message_id: str,
    redeliver_at_ms: int = 0,
    reason: str = "",
    now_ms: int | None = None,
) -> bool:
    """One failed attempt of an in-flight entry; True when it is out of attempts.

    Its next delivery is at `redeliver_at_ms` if given (a nack that names its backoff),
    else, with `now_ms` (an ack timeout, a nack), after its retry backoff
    (`AttemptPolicy.retry_delay_ms`: pure arithmetic, no engine call), else at once (an
    ended stream: the consumer failed, not the message)."""
    assert entry.owner is not None
    entry.owner.in_flight -= 1
    entry.owner = None
    topic.hub.trace.failed(message_id, entry.attempt, reason)
    limit = entry.limit
    if limit and entry.attempt >= limit:
        topic.untrack(message_id)
        topic.dying.append((message_id, entry, reason))
        return True
    if not redeliver_at_ms and now_ms is not None:
        delay_ms = topic.hub.attempt_policy.retry_delay_ms(entry)
        redeliver_at_ms = now_ms + delay_ms if delay_ms > 0 else 0
    entry.attempt += 1
    if redeliver_at_ms:
        heapq.heappush(topic.delayed, (redeliver_at_ms, message_id))
    else:
        topic.redeliver.append(message_id)
    return False


def nack(
    topic: TopicDispatcher, message_ids: list[str], redeliver_at_ms: int, reason: str,
    now_ms: int,
) -> tuple[int, int]:  # fmt: skip
    """Client-reported failures: (ids that were in flight, of those out of attempts)."""
    nacked = dead = 0
    for message_id in dict.fromkeys(message_ids):
        entry = topic.entries.get(message_id)
        if entry is not None and entry.owner is not None:
            nacked += 1
            dead += fail(topic, entry, message_id, redeliver_at_ms, reason or "nack", now_ms)
    return nacked, dead


def release(topic: TopicDispatcher, message_ids: list[str]) -> int:
    """Messages their consumer gives back unstarted (a Nack with `release`): not failed
    attempts, so not through `fail`. Each goes to the front as it was, its attempt number
    unchanged (its next delivery is the same attempt again), with no backoff and no step
    toward its limit: a consumer that stops cleanly must not use up a healthy message's
    attempts. Its owner is stopping (`Subscriber.draining`): it is handed no more, so a
    released message goes to the others instead of straight back to it. Returns the ids
    that were in flight; any other id is ignored, as by a nack."""
    released = 0
    for message_id in dict.fromkeys(message_ids):
        entry = topic.entries.get(message_id)
        if entry is not None and entry.owner is not None:
            owner = entry.owner
            owner.in_flight -= 1
            owner.draining = True
            entry.owner = None
            topic.redeliver.append(message_id)
            released += 1
    return released


def backoffs_ended(topic: TopicDispatcher, now_ms: int) -> None:
    """Entries whose retry backoff ended go to the front."""
    while topic.delayed and topic.delayed[0][0] <= now_ms:
        _, message_id = heapq.heappop(topic.delayed)
        entry = topic.entries.get(message_id)
        if entry is not None and entry.owner is None:
            topic.redeliver.append(message_id)


def move_dead_letters(engine, topic: TopicDispatcher) -> None:
    """Move the entries out of attempts to their dead-letter topics (lock not held).

    One the engine cannot take now (stopping, overloaded) goes back to the front and
    fails again on its next delivery.
    """
    with topic.cond:
        dying, topic.dying = topic.dying, []
    for message_id, entry, reason in dying:
        try:
            engine.dead_letter(topic.name, message_id, entry.attempt, reason)
        except (ShuttingDown, Overloaded) as exc:
            log.warning("dead_letter_refused", message_id=message_id, error=str(exc))
            with topic.cond:
                if message_id not in topic.entries:
                    topic.track(message_id, entry)
                topic.redeliver.append(message_id)
                topic.cond.notify_all()
