"""A version-2 store written the way decision 0014 lays it out, for the state join's tests
(`timerwheel.store.batch_state`): a store opened by the product's `open_batch_store`, sends
staged by the product's writer (`timerwheel.store.segment_send`), fires and cascades by
the product's (`timerwheel.store.segment_fire`), and a small writer of what the product
does not write yet (Acks, overrides, sweeps: step 4) with the step-1 codecs. That writer
trusts its caller to ask only what the engine would allow (an Ack of a FIRED message, a
Cancel of a SCHEDULED one, ...). It keeps the pending counters as the product's send and
fire do: a Cancel of a SCHEDULED message leaves its minute, a move leaves the old one (if
SCHEDULED) and joins the new one.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import NamedTuple

from rocksdict import ReadOptions, WriteBatch

from timerwheel.common import State
from timerwheel.store import batch_entries as be
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import BatchStore, new_batch, open_batch_store
from timerwheel.store.keys import CF_WHEEL, count_bucket_key
from timerwheel.store.rocks import RocksTuning
from timerwheel.store.segment_ids import parse_id
from timerwheel.store.segment_send import SLOT_MS, NewSends


@contextmanager
def open_v2(path: str, segment_max: int | None = None, seed: int = 0):
    """A version-2 store (`open_batch_store`, unsynced writes: tests); yields a `Store`.
    Its send draws the ids' random parts from a seeded generator."""
    more = {} if segment_max is None else {"segment_max": segment_max}
    opened = open_batch_store(
        path, RocksTuning(sync_writes=False), randbytes=random.Random(seed).randbytes, **more
    )
    try:
        yield Store(opened)
    finally:
        opened.close()


class Store(NamedTuple):
    opened: BatchStore

    @property
    def families(self):
        return self.opened.database.families

    @property
    def handles(self):
        return self.opened.database.handles

    @property
    def db(self):
        return self.opened.database.db

    def write(
        self, puts: dict[str, dict[bytes, bytes | None]], deltas: dict[bytes, int] | None = None
    ) -> None:
        """One atomic batch: None deletes the key; `deltas` change the pending counters."""
        batch = new_batch()
        for family, writes in puts.items():
            batch.writes[family].update(writes)
        batch.count_deltas.update(deltas or {})
        self.opened.commit(batch, sync=False)

    def items(self, family: str, lo: bytes, hi: bytes) -> list[tuple[bytes, bytes]]:
        read_options = ReadOptions()
        read_options.set_iterate_upper_bound(hi)
        return list(self.families[family].items(from_key=lo, read_opt=read_options))


def wheel_of(delay_ms: int) -> str:
    """Where this writer places a message: the product's fire cascades the upper wheels'
    entries when their slot starts, so a short delay in the hour wheel is cascaded twice."""
    return "second" if delay_ms < 1000 else "minute" if delay_ms < 2500 else "hour"


class Writer:
    """The engine's memory of a version-2 store (a state byte, a fire chunk and the Ack
    calls of each live message) and the entries each operation writes."""

    def __init__(self, store: Store, retention_ms: int) -> None:
        self.store, self.retention_ms = store, retention_ms
        self.ack_seq = 0
        self.firer = store.opened.firer
        self.cursor = self.firer.cursor()
        self.state: dict[int, bytearray] = {}
        self.deliver: dict[int, list[int]] = {}
        self.topic: dict[int, list[str]] = {}
        self.terminal_ms: dict[int, list[int]] = {}
        self.left: dict[int, int] = {}
        self.chunk_of: dict[tuple[int, int], int] = {}
        self.chunk_left: dict[int, list] = {}  # chunk seq: [ready key, un-retired]
        self.acks_of: dict[int, set[int]] = {}  # segment: its live Ack entries
        self.ack_live: dict[int, set[int]] = {}  # Ack entry: its segments not terminal
        self.overrides: dict[tuple[int, int], be.Override] = {}

    def send(self, messages: list[tuple[str, int]], now_ms: int) -> list[str]:
        """One group commit of (topic, delay ms) messages, through the product's send
        (`timerwheel.store.segment_send`); their ids, in order."""
        topics = [topic for topic, _ in messages]
        deliver = [now_ms + delay for _, delay in messages]
        sends = NewSends(
            topics, [f"body {i}".encode() for i in range(len(messages))], deliver,
            [wheel_of(delay) for _, delay in messages],
        )  # fmt: skip
        batch = new_batch()
        staged = self.store.opened.sender.stage(batch, sends, now_ms)
        self.store.opened.commit(batch, sync=False)
        for seq, positions in staged.segments:
            n = len(positions)
            self.state[seq] = bytearray([State.SCHEDULED]) * n
            self.deliver[seq] = [deliver[p] for p in positions]
            self.topic[seq] = [topics[p] for p in positions]
            self.terminal_ms[seq], self.left[seq] = [0] * n, n
            self.acks_of[seq] = set()
        return staged.ids

    def _place(self, writes, seq: int, index: int, deliver_ms: int, wheel: str) -> None:
        """Add one (deliver ms, index) pair to the segment's entry of its slot."""
        family = CF_WHEEL[wheel]
        key = bk.wheel_entry_key(deliver_ms - deliver_ms % SLOT_MS[wheel], seq)
        staged = writes.setdefault(family, {})
        old = staged.get(key) or self.store.families[family].get(key)
        pairs = set() if old is None else set(zip(*be.decode_wheel_entry(old), strict=True))
        pairs = sorted(pairs | {(deliver_ms, index)})
        staged[key] = be.wheel_entry([p[0] for p in pairs], [p[1] for p in pairs])
        self.firer.placed(wheel, deliver_ms - deliver_ms % SLOT_MS[wheel])

    def fire(self, now_ms: int, limit: int) -> bool:
        """Fire through `now_ms` in cursor order, at most `limit` live messages, through the
        product's fire (its cascade first); True when it left due work."""
        batch = new_batch()
        fired = self.firer.stage(batch, now_ms, limit)
        self.store.opened.commit(batch, sync=False)
        self.cursor = fired.cursor
        for chunk in fired.chunks:
            refs = list(zip(chunk.segments, chunk.indexes, strict=True))
            for seq, index in refs:
                if (
                    self.state[seq][index] != State.SCHEDULED
                    or self.topic_of(seq, index) != chunk.topic
                ):
                    raise AssertionError(
                        f"fired {seq}/{index} of {chunk.topic}: {self.state[seq][index]!r}"
                    )
                self.state[seq][index] = State.FIRED
            self.chunk_left[chunk.seq] = [chunk.key, len(refs)]
            self.chunk_of.update(dict.fromkeys(refs, chunk.seq))
        return fired.more

    def topic_of(self, seq: int, index: int) -> str:
        found = self.overrides.get((seq, index))
        return self.topic[seq][index] if found is None or found.topic is None else found.topic

    def ack(self, message_ids: list[str], now_ms: int) -> None:
        """One Ack call of FIRED messages: one `acked` entry."""
        self.ack_seq += 1
        writes: dict[str, dict[bytes, bytes | None]] = {bk.CF_READY: {}, bk.CF_ACKED: {}}
        places = [(p.segment, p.message_index) for p in map(parse_id, message_ids)]
        writes[bk.CF_ACKED][bk.acked_key(self.ack_seq)] = be.refs_entry(
            now_ms, *zip(*places, strict=True)
        )
        self.ack_live[self.ack_seq] = {seq for seq, _ in places}
        for seq, index in places:
            self.acks_of[seq].add(self.ack_seq)
            self._retire(writes, seq, index)
            self._terminal(writes, seq, index, State.ACKED, now_ms)
        self.store.write(writes)

    def cancel(self, message_id: str, now_ms: int) -> None:
        """Cancel a SCHEDULED message or retire a FIRED one (a purge, a dead-letter move):
        one override."""
        parsed = parse_id(message_id)
        seq, index = parsed.segment, parsed.message_index
        writes: dict[str, dict[bytes, bytes | None]] = {bk.CF_READY: {}}
        deltas = {}
        if self.state[seq][index] == State.FIRED:
            self._retire(writes, seq, index)
        else:
            deltas[self._minute(seq, index)] = -1
        self._override(writes, seq, index, cancelled_at_ms=now_ms)
        self._terminal(writes, seq, index, State.CANCELLED, now_ms)
        self.store.write(writes, deltas)

    def move(self, message_id: str, deliver_ms: int, delay_ms: int) -> None:
        """Reschedule a SCHEDULED message or Nack a FIRED one with a delay: an override
        and the new pair in the wheel (the old pair stays)."""
        if deliver_ms <= self.cursor[0]:
            raise ValueError(f"an override at {deliver_ms} is not after the cursor {self.cursor}")
        parsed = parse_id(message_id)
        seq, index = parsed.segment, parsed.message_index
        writes: dict[str, dict[bytes, bytes | None]] = {bk.CF_READY: {}}
        deltas = {}
        if self.state[seq][index] == State.FIRED:
            self._retire(writes, seq, index)
            self.state[seq][index] = State.SCHEDULED
        else:
            deltas[self._minute(seq, index)] = -1
        self._override(writes, seq, index, deliver_ms=deliver_ms)
        self.deliver[seq][index] = deliver_ms
        new = self._minute(seq, index)
        deltas[new] = deltas.get(new, 0) + 1
        self._place(writes, seq, index, deliver_ms, wheel_of(delay_ms))
        self.store.write(writes, deltas)

    def sweep(self, now_ms: int) -> None:
        """Every segment whose expiry has come: its segment, `segstate`, `expiry` and
        overrides, in one batch."""
        due = self.store.items(bk.CF_EXPIRY, b"", bk.slot_bound(now_ms + 1))
        batch = WriteBatch(raw_mode=True)
        handles = self.store.handles
        for key, _ in due:
            seq = bk.decode_expiry_key(key)[1]
            batch.delete(bk.segment_key(seq), handles[bk.CF_SEGMENTS])
            batch.delete(bk.segment_key(seq), handles[bk.CF_SEGSTATE])
            batch.delete(key, handles[bk.CF_EXPIRY])
            batch.delete_range(*bk.segment_range(seq), handles[bk.CF_OVERRIDES])
        self.store.db.write(batch)
        for key, _ in due:
            self.firer.forget(bk.decode_expiry_key(key)[1])

    def _override(self, writes, seq: int, index: int, **changed) -> None:
        found = self.overrides.get((seq, index), be.Override())._replace(**changed)
        self.overrides[seq, index] = found
        self.firer.overridden(seq, index, found)
        writes.setdefault(bk.CF_OVERRIDES, {})[bk.place_key(seq, index)] = be.override_value(found)

    def _minute(self, seq: int, index: int) -> bytes:
        """The pending counter of the message's topic and deliver minute."""
        deliver_ms = self.deliver[seq][index]
        return count_bucket_key(
            self.topic_of(seq, index).encode(), deliver_ms - deliver_ms % 60_000
        )

    def _retire(self, writes, seq: int, index: int) -> None:
        """The message leaves its fire chunk; the chunk's `ready` entry goes with its last."""
        chunk = self.chunk_of.pop((seq, index))
        left = self.chunk_left[chunk]
        left[1] -= 1
        if not left[1]:
            writes[bk.CF_READY][left[0]] = None
            del self.chunk_left[chunk]

    def _terminal(self, writes, seq: int, index: int, state: State, now_ms: int) -> None:
        """The message turns terminal; with its segment's last, `segstate` and `expiry` are
        written and the Ack entries that name only terminal segments go."""
        self.state[seq][index], self.terminal_ms[seq][index] = state, now_ms
        self.left[seq] -= 1
        if self.left[seq]:
            return
        segstate = be.segstate_entry(bytes(self.state[seq]), self.terminal_ms[seq])
        writes.setdefault(bk.CF_SEGSTATE, {})[bk.segment_key(seq)] = segstate
        expiry = bk.expiry_key(now_ms + self.retention_ms, seq)
        writes.setdefault(bk.CF_EXPIRY, {})[expiry] = b""
        for ack in self.acks_of.pop(seq):
            self.ack_live[ack].discard(seq)
            if not self.ack_live[ack]:
                writes.setdefault(bk.CF_ACKED, {})[bk.acked_key(ack)] = None
                del self.ack_live[ack]
