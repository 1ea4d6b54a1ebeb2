"""Server-made message ids (see MessageIds)."""

from __future__ import annotations

import secrets


class MessageIds:
    """Server-made message ids, 128 bits (32 hex digits): the send time in ms (48 bits)
    then 80 random bits from `secrets`.

    Unguessable: the random part says nothing about any other id, so holding an id is
    what lets a client read or cancel its message (ids used to be a per-start prefix and
    a counter, and a second client could predict the next one); 2**80 guesses per
    millisecond is out of reach. The time prefix makes ids sort by send time, so new
    records land at the end of the `messages` key space: with fully random ids the
    schedule bench ran about a quarter slower (inserts all over the key space; measured in
    docs/security.md). An id reveals when it was sent, which its record holds anyway.
    A batch draws its randomness in one call and slices it: ~0.3 us an id.
    """

    RANDOM_BYTES = 10

    def take(self, count: int, now_ms: int) -> list[str]:
        """`count` new ids sent at `now_ms`. Thread-safe: no state of ours."""
        prefix = f"{now_ms:012X}"
        digits = 2 * self.RANDOM_BYTES
        text = secrets.token_hex(self.RANDOM_BYTES * count).upper()
        return [prefix + text[i : i + digits] for i in range(0, digits * count, digits)]
