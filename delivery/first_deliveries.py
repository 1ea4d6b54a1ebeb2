"""First deliveries held for their Ack: no `trace` entry, and no call to the engine, for
a message delivered once and acked.

Every delivery attempt is an event of its message's trace. Handed to the engine as it
came (`timerwheel.delivery.trace`), a batch's events were a call from the delivery process
to the engine before each batch went out, and a `trace` entry a message, a noticeable
share of a burst's work: with first attempts left out (`trace_first_deliveries = false`)
a large burst ended about a tenth sooner
(docs/decisions/0004-first-deliveries-held-for-their-ack.md). Nearly every message is
delivered once and acked soon after, and the Ack rewrites its record anyway.
So the delivery side keeps a batch's first attempts here (`hold`), and the Ack hands the
engine, beside its ids, the delivery each one had (`take_for_ack`: a trailer per id,
written into the acked record: timerwheel.store.records, version 2). A held event is handed over
as an ordinary one, with the time it was delivered at, when:
 1. its message is not acked within `first_delivery_hold_ms` (`release_due`, at the
    hub's next hand-over);
 2. a reader needs it stored: a `Get` with the trace (`release`);
 3. the attempt failed (nack, ack timeout, stream ended), before the failure's event;
 4. it is delivered as attempt 1 again while held;
 5. more than `MAX_HELD` messages are held: the oldest groups go, so memory is bounded;
 6. the hub stops (`release_all`).
What a `kill -9` of the delivery process loses is what it loses of any event not yet
handed over, for at most the hold instead of a moment: such a message, un-acked, is
delivered again as attempt 1. Nothing else changes: the trace reads the same.

Pure: no I/O and no clock (times are passed in); the caller serialises access.
"""

from __future__ import annotations

from collections import deque
from itertools import repeat
from operator import attrgetter

from timerwheel.store import records

# At 40,000 deliveries a second and acks within a second, about 40,000 are held; a burst
# of 1,000,000 held up to about 200,000. Each costs about 100 bytes here (a dict slot;
# the id string is the one the delivery already had).
MAX_HELD = 262_144

# (subscriber, delivered_at_ms, message ids): first attempts to hand over as events
Released = tuple[str, int, list[str]]


class _Group:
    """The first attempts of one delivery batch."""

    __slots__ = ("at_ms", "ids", "subscriber", "trailer")

    def __init__(self, ids: list[str], subscriber: str, at_ms: int, trailer: bytes) -> None:
        self.ids = ids
        self.subscriber = subscriber
        self.at_ms = at_ms
        self.trailer = trailer  # what the Ack has written into each acked record


_NOTHING = _Group([], "", 0, b"")  # an id not held: its Ack writes nothing of it
_TRAILER = attrgetter("trailer")


class FirstDeliveries:
    def __init__(self, hold_ms: int) -> None:
        self.hold_ms = hold_ms
        self._held: dict[str, _Group] = {}
        self._groups: deque[_Group] = deque()  # in the order held: their times ascend

    def __len__(self) -> int:
        return len(self._held)

    def hold(self, message_ids: list[str], subscriber: str, at_ms: int) -> list[Released]:
        """Hold a batch's first attempts, delivered to `subscriber` at `at_ms`. Returns
        what must be handed over now: earlier first attempts of these ids still held,
        and past `MAX_HELD` the oldest groups."""
        released = []
        if not self._held.keys().isdisjoint(message_ids):
            released += self.release(message_ids)
        trailer = records.first_delivery_trailer(at_ms, subscriber)
        group = _Group(message_ids, subscriber, at_ms, trailer)
        self._held.update(zip(message_ids, repeat(group)))
        self._groups.append(group)
        while len(self._held) > MAX_HELD:
            released += self._release_group(self._groups.popleft())
        return released

    def take_for_ack(self, message_ids: list[str]) -> list[bytes]:
        """The first-delivery trailers for these ids' acked records (b"": none held),
        no longer held: with no Python step a message."""
        return list(map(_TRAILER, map(self._held.pop, message_ids, repeat(_NOTHING))))

    def give_back(self, message_ids: list[str], trailers: list[bytes]) -> list[Released]:
        """The Ack that took these failed: its first deliveries, as events to hand over."""
        taken = [(m, records.read_first_delivery_trailer(t)) for m, t in zip(
            message_ids, trailers, strict=True) if t]  # fmt: skip
        by_delivery: dict[tuple[int, str], list[str]] = {}
        for message_id, delivery in taken:
            by_delivery.setdefault(delivery, []).append(message_id)
        return [(subscriber, at_ms, ids) for (at_ms, subscriber), ids in by_delivery.items()]

    def release_due(self, now_ms: int) -> list[Released]:
        """The first attempts held `hold_ms` without an Ack."""
        released, groups, hold_ms = [], self._groups, self.hold_ms
        while groups and groups[0].at_ms + hold_ms <= now_ms:
            released += self._release_group(groups.popleft())
        return released

    def release(self, message_ids: list[str]) -> list[Released]:
        """The held first attempts of these ids."""
        held, found = self._held, []
        for message_id in message_ids:
            group = held.pop(message_id, None)
            if group is not None:
                found.append((group.subscriber, group.at_ms, [message_id]))
        return found

    def release_all(self) -> list[Released]:
        released = []
        while self._groups:
            released += self._release_group(self._groups.popleft())
        return released

    def _release_group(self, group: _Group) -> list[Released]:
        held = self._held
        still = [m for m in group.ids if held.get(m) is group]
        for message_id in still:
            del held[message_id]
        return [(group.subscriber, group.at_ms, still)] if still else []
