"""Each fired message's attempt limit and retry backoff, and the attempt counts an earlier
hub already made of it (timerwheel.delivery.hub's dispatchers ask it; docs/delivery.md).

Its own module because it is the hub's one piece of per-message policy: which limit and
retry policy a message has (its send's options, its topic's table, else the server's),
how long a failed attempt waits, and where a restarted hub carries the counts on from.
The hub itself only decides who gets what next.

After a restart the hub delivers every fired-but-unacked message again, and attempt
counts carry on across it: each attempt is an event of its message's trace
(`timerwheel.delivery.trace`), and the new hub reads back the highest attempt recorded for
each message that fired before it started (`restore_attempts`): the redelivery is the
next attempt, and a message that had used up its attempts goes to its dead-letter topic.
Only attempts never recorded do not count: first attempts left out by
`trace_first_deliveries = false`, and events a killed delivery process had not yet
handed over (a first attempt waits for its Ack: `timerwheel.delivery.first_deliveries`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from timerwheel.engine.api import FiredSource
from timerwheel.store import records
from timerwheel.store.fired_record import FiredRecord
from timerwheel.wheels.domain import DeliveryOptions
from timerwheel.wheels.retry import RetryPolicy, backoff_ms
from timerwheel.wheels.settings import Settings
from timerwheel.wheels.topic_policy import by_topic

if TYPE_CHECKING:
    from timerwheel.delivery.dispatcher import Entry, TopicDispatcher


class AttemptPolicy:
    """The attempt limits and retry policies of one hub's messages."""

    def __init__(
        self, engine: FiredSource, settings: Settings, random01: Callable[[], float]
    ) -> None:
        """`random01` draws the retry backoffs' jitter (a test pins it). Messages fired
        before now may have been delivered by an earlier hub (before a restart): their
        attempt counts are read back (`restore_attempts`)."""
        self.engine = engine
        self.settings = settings
        self.retry_policy = settings.retry_policy()  # of messages whose send names none
        self._topic_defaults = by_topic(settings)  # ... on a topic with a table of its own
        self._random01 = random01
        self._started_at_ms = engine.now_ms()

    def delivery_options(self, fetched: list[FiredRecord]) -> dict[str, DeliveryOptions]:
        """(attempt limit, retry policy) of fetched messages that have send options of
        their own (the few whose record says so), in one call; every other message has the
        server's `max_attempts` and retry policy. Asked with the fetch, so no failed
        attempt needs to ask later."""
        own = records.ids_with_extras(fetched)
        return self.engine.delivery_options_of(own) if own else {}

    def topic_defaults(self, topic: str) -> tuple[int, RetryPolicy | None]:
        """(attempt limit, retry policy; None: the server's) of `topic`'s messages whose
        send names none: its table in `Settings.topics`, else the server's settings."""
        return self._topic_defaults.get(topic, (self.settings.max_attempts, None))

    def retry_delay_ms(self, entry: Entry) -> int:
        """How long `entry` waits after its failed attempt `entry.attempt`."""
        return backoff_ms(entry.retry or self.retry_policy, entry.attempt, self._random01())

    def restore_attempts(
        self, dispatcher: TopicDispatcher, new: list[tuple[str, Entry]]
    ) -> list[tuple[str, Entry]]:
        """Entries read from the store, with the attempt counts of earlier deliveries
        (from their traces) carried on: the next attempt after n delivered is n + 1, and
        one already at its last allowed attempt goes to its dead-letter topic. Returns
        the entries to deliver. Call with the dispatcher's lock held."""
        started_at_ms, fired_at_ms = self._started_at_ms, records.record_fired_at_ms
        older = [m for m, e in new if fired_at_ms(e.fired.record) <= started_at_ms]
        made = self.engine.delivery_attempts(older) if older else {}
        if not made:
            return new
        deliver = []
        for message_id, entry in new:
            if message_id in made:
                entry.attempt = made[message_id]
                limit = entry.limit
                if limit and entry.attempt >= limit:
                    dispatcher.untrack(message_id)
                    reason = "attempts used up before a restart"
                    dispatcher.dying.append((message_id, entry, reason))
                    continue
                entry.attempt += 1
            deliver.append((message_id, entry))
        return deliver
