"""Server-made message ids (see MessageIds)."""

from __future__ import annotations

import secrets


class MessageIds:
    """Server-made message ids, 128 bits (32 hex digits): the timer's deliver time in ms
    (48 bits) then 80 random bits from `secrets`.

    Unguessable: the random part says nothing about any other id, so holding an id is
    what lets a client read or cancel its message (ids used to be a per-start prefix and
    a counter, and a second client could predict the next one); 2**80 guesses per
    millisecond is out of reach. An id reveals when its timer was due when sent, which
    its record holds anyway.

    Why the deliver time leads: `messages` is keyed by id, and a record is read and
    written again when it fires and when it is acked, both in deliver-time order. With
    ids in deliver-time order the timers of one fire tick are neighbours in `messages`,
    so the fire's multi-get reads a few adjacent blocks instead of one block a record,
    and the fire's and the ack's rewrites insert next to each other in the memtable
    instead of at random points of it. The send's insert is the random one now (it was
    at the end of the key space with send-time ids): one random insert a message instead
    of two. At a steady rate that is about a fifth less of the engine's CPU a message; a
    backlog of far-future timers, sent and never fired, pays somewhat more a send
    (docs/decisions/0005-ids-begin-with-deliver-time.md).

    A batch draws its randomness in one call and slices it.
    """

    RANDOM_BYTES = 10

    def take(self, deliver_times_ms: list[int]) -> list[str]:
        """New ids for timers due at `deliver_times_ms`, in that order. Thread-safe: no
        state of ours."""
        digits = 2 * self.RANDOM_BYTES
        text = secrets.token_hex(self.RANDOM_BYTES * len(deliver_times_ms)).upper()
        return [
            f"{due_ms:012X}{text[start : start + digits]}"
            for due_ms, start in zip(deliver_times_ms, range(0, len(text), digits), strict=True)
        ]
