"""A version-2 store written the way decision 0014 lays it out, for the state join's tests
(`timerwheel.store.batch_state`): a store opened by the product's `open_batch_store`, and
every operation staged by the product's writers: sends (`timerwheel.store.segment_send`),
fires and cascades (`segment_fire`), Acks and sweeps (`segment_ack`), Cancels and moves
(`segment_override`), REPLACEs and bulk cancels (`segment_moves`, pages of
`segment_bulk`), one group commit each. `Writer` trusts its caller to ask only what
the engine would allow (an Ack of a FIRED message, a Cancel of a SCHEDULED or FIRED one,
...) and checks that the product did it. `Store.write` stages entries by hand, for the
join's rule tests.
"""

from __future__ import annotations

import random
from contextlib import contextmanager
from typing import NamedTuple

from rocksdict import ReadOptions

from timerwheel.common import State
from timerwheel.store import batch_keys as bk
from timerwheel.store.batch_store import BatchStore, new_batch, open_batch_store
from timerwheel.store.rocks import RocksTuning
from timerwheel.store.segment_bulk import select
from timerwheel.store.segment_ids import format_id
from timerwheel.store.segment_send import NewSends
from timerwheel.store.segments import Extras, SegmentView
from timerwheel.wheels.bulk import TimerFilter
from timerwheel.wheels.domain import FailedPrecondition


@contextmanager
def open_v2(
    path: str, segment_max: int | None = None, seed: int = 0, retention_ms: int | None = None
):
    """A version-2 store (`open_batch_store`, unsynced writes: tests); yields a `Store`.
    Its send draws the ids' random parts from a seeded generator."""
    more: dict = {} if segment_max is None else {"segment_max": segment_max}
    if retention_ms is not None:
        more["retention_ms"] = retention_ms
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


def commit(store: Store, stage, *args):
    """Stage `stage(batch, *args)` into a group commit of its own and commit it: the
    writers' tests make one call a commit."""
    batch = new_batch()
    out = stage(batch, *args)
    store.opened.commit(batch, sync=False)
    return out


def fire(store: Store, now_ms: int, limit: int = 1_000):
    """The fire through `now_ms`, at most `limit` messages, a commit of its own."""
    return commit(store, store.opened.acker.stage_fire, now_ms, limit)


def wheel_of(delay_ms: int) -> str:
    """Where this writer places a message: the product's fire cascades the upper wheels'
    entries when their slot starts, so a short delay in the hour wheel is cascaded twice."""
    return "second" if delay_ms < 1000 else "minute" if delay_ms < 2500 else "hour"


class Writer:
    """The operations of the join's model test, each one group commit through the
    product's writers, checking that each did what its caller asked."""

    def __init__(self, store: Store) -> None:
        self.store, self.opened = store, store.opened

    @property
    def cursor(self):
        return self.opened.firer.cursor()

    def send(self, messages: list[tuple[str, int]], now_ms: int) -> list[str]:
        """One group commit of (topic, delay ms) messages; their ids, in order."""
        topics = [topic for topic, _ in messages]
        deliver = [now_ms + delay for _, delay in messages]
        sends = NewSends(
            topics, [f"body {i}".encode() for i in range(len(messages))], deliver,
            [wheel_of(delay) for _, delay in messages],
        )  # fmt: skip
        batch = new_batch()
        staged = self.opened.sender.stage(batch, sends, now_ms)
        self.opened.commit(batch, sync=False)
        return staged.ids

    def fire(self, now_ms: int, limit: int) -> bool:
        """Fire through `now_ms` in cursor order, at most `limit` live messages (the
        cascade first); True when it left due work."""
        batch = new_batch()
        fired = self.opened.acker.stage_fire(batch, now_ms, limit)
        self.opened.commit(batch, sync=False)
        return fired.more

    def ack(self, message_ids: list[str], now_ms: int) -> None:
        """One Ack call of FIRED messages: every one is acked."""
        batch = new_batch()
        acked = self.opened.acker.stage_ack(batch, [m.encode() for m in message_ids], now_ms)
        self.opened.commit(batch, sync=False)
        if acked != (len(message_ids), []):
            raise AssertionError(f"an Ack of {len(message_ids)} FIRED messages: {acked}")

    def cancel(self, message_id: str, now_ms: int) -> None:
        """Cancel a SCHEDULED message or retire a FIRED one (a purge, a dead-letter move)."""
        self._one(self.opened.overrides.stage_cancel, message_id, now_ms)

    def move(self, message_id: str, deliver_ms: int, delay_ms: int) -> None:
        """Reschedule a SCHEDULED message or Nack a FIRED one with a delay, into the
        wheel a send of that delay goes to."""
        self._one(self.opened.overrides.stage_move, message_id, deliver_ms, wheel_of(delay_ms))

    def replace(
        self, client_id: str, topic: str, delay_ms: int, now_ms: int
    ) -> tuple[State | None, str] | None:
        """One group commit of a REPLACE: the old copy `client_id` names, then the send of
        the new message under it; (the old copy's state, the new message's server-made
        id), or None, nothing committed, when the old copy may not be replaced."""
        batch = new_batch()
        try:
            was = self.opened.moves.stage_replace(batch, client_id, now_ms)
        except FailedPrecondition:
            return None
        sends = NewSends(
            [topic], [b"replaced"], [now_ms + delay_ms], [wheel_of(delay_ms)],
            extras={0: Extras(client_id=client_id)},
        )  # fmt: skip
        seq = self.opened.sender.stage(batch, sends, now_ms).segments[0].seq
        view = SegmentView(batch.writes[bk.CF_SEGMENTS][bk.segment_key(seq)])  # type: ignore[arg-type]
        self.opened.commit(batch, sync=False)
        return was, format_id(view.deliver_ms(0), seq, 0, view.random(0))

    def bulk_cancel(self, selected: TimerFilter, purge: bool, now_ms: int) -> list[str]:
        """A bulk cancel (or purge) a page of 3 at a time, each page one group commit;
        every id a page selected must be changed. The ids changed, in order."""
        out: list[str] = []
        after = None
        while True:
            page = select(self.store.families, selected, purge=purge, after=after, limit=3)
            batch = new_batch()
            done = self.opened.moves.stage_bulk_cancel(batch, page.ids, selected, purge, now_ms)
            self.opened.commit(batch, sync=False)
            changed = done.cancelled + [m for ids in done.purged.values() for m in ids]
            if sorted(changed) != sorted(page.ids):
                raise AssertionError(f"a page selected {page.ids}, changed {changed}")
            out += changed
            if page.next is None:
                return out
            after = page.next

    def sweep(self, now_ms: int) -> None:
        """Every segment whose expiry has come, a sweep call at a time."""
        acker = self.opened.acker
        while True:
            batch = new_batch()
            swept = acker.stage_sweep(batch, now_ms, limit=2)
            self.opened.commit(batch, sync=False)
            acker.swept(swept)
            if not swept:
                return

    def _one(self, stage, message_id: str, *args) -> None:
        batch = new_batch()
        was = stage(batch, message_id, *args)
        self.opened.commit(batch, sync=False)
        if was not in (State.SCHEDULED, State.FIRED):
            raise AssertionError(f"{stage.__name__} of {message_id}: {was!r}")
